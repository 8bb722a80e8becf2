//! The durable SCRAM credential store (AlterUserScramCredentials /
//! DescribeUserScramCredentials, `kmirror scram add`) and the snapshot authentication reads.
//!
//! Per (user, mechanism) it keeps what RFC 5802 lets a server keep: salt, iteration count,
//! StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey = HMAC(SaltedPassword,
//! "Server Key"). Never the password: PLAIN is checked by deriving the keys again from the
//! offered password with the stored salt.
//!
//! The set lives in `<data_dir>/scram.json`, replaced atomically through [`AppendFile`] on each
//! change; a change is reported only once durable. [`ScramRegistry`] serializes writers behind
//! a mutex (held across the fsync) and publishes every durable state as an immutable
//! [`Credentials`] snapshot: authentication (on engine cores) only loads that snapshot, never
//! the mutex.
//!
//! In a cluster the set is replicated on the Raft log instead (`quorum`,
//! `ClusterCommand::Scram`): the proposer turns each change into a [`ScramEdit`] carrying the
//! derived keys (never the salted password, as Kafka's `UserScramCredentialRecord`), and every
//! node applies the edits to an in-memory store ([`ScramStore::in_memory`]) with the same checks.
//!
//! Kafka's semantics of AlterUserScramCredentials are applied here: per user all-or-nothing,
//! iterations within `MIN_ITERATIONS..=MAX_ITERATIONS`, deleting a missing credential is
//! RESOURCE_NOT_FOUND, a user named twice in one request (even for two mechanisms) is
//! DUPLICATE_RESOURCE (as Kafka 4.1 answers).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

use crate::append_file::AppendFile;

const FILE: &str = "scram.json";

/// Kafka's lower bound for both SHA-2 mechanisms (`ScramMechanism.minIterations`).
pub const MIN_ITERATIONS: i32 = 4096;
/// Kafka's upper bound on iterations accepted by AlterUserScramCredentials.
pub const MAX_ITERATIONS: i32 = 16384;

/// A SCRAM mechanism with its Kafka wire code (`ScramMechanism` in the protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

impl ScramMechanism {
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    pub fn code(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    pub fn from_code(code: i8) -> Option<Self> {
        ScramMechanism::ALL.into_iter().find(|m| m.code() == code)
    }

    /// The SASL mechanism name (`SCRAM-SHA-256`).
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        ScramMechanism::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(name))
    }

    /// H(data).
    pub fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => Sha256::digest(data).to_vec(),
            ScramMechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// HMAC(key, data).
    pub fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
            let mut m = <M as hmac::digest::KeyInit>::new_from_slice(key)
                .expect("HMAC takes keys of any length");
            m.update(data);
            m.finalize().into_bytes().to_vec()
        }
        match self {
            ScramMechanism::Sha256 => run::<Hmac<Sha256>>(key, data),
            ScramMechanism::Sha512 => run::<Hmac<Sha512>>(key, data),
        }
    }

    /// SaltedPassword = Hi(password, salt, iterations) (PBKDF2 with this HMAC).
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => {
                pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password, salt, iterations).to_vec()
            }
            ScramMechanism::Sha512 => {
                pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password, salt, iterations).to_vec()
            }
        }
    }
}

/// What the server keeps of one user's password for one mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

impl ScramCredential {
    /// From the salted password an admin client sends (AlterUserScramCredentials).
    pub fn from_salted_password(
        mech: ScramMechanism,
        salt: &[u8],
        salted: &[u8],
        iterations: i32,
    ) -> Self {
        let client_key = mech.hmac(salted, b"Client Key");
        ScramCredential {
            salt: salt.to_vec(),
            stored_key: mech.hash(&client_key),
            server_key: mech.hmac(salted, b"Server Key"),
            iterations,
        }
    }

    /// From a clear password (offline bootstrap).
    pub fn from_password(
        mech: ScramMechanism,
        password: &str,
        salt: &[u8],
        iterations: i32,
    ) -> Self {
        let salted = mech.salted_password(password.as_bytes(), salt, iterations.max(1) as u32);
        Self::from_salted_password(mech, salt, &salted, iterations)
    }

    /// Whether `password` derives this credential's StoredKey (PLAIN), in constant time.
    pub fn matches_password(&self, mech: ScramMechanism, password: &str) -> bool {
        use subtle::ConstantTimeEq;
        let again = Self::from_password(mech, password, &self.salt, self.iterations);
        again.stored_key.ct_eq(&self.stored_key).into()
    }
}

/// DescribeUserScramCredentials' answer for one user: its (mechanism, iterations) pairs.
pub type UserDescription = (String, Result<Vec<(ScramMechanism, i32)>, ScramError>);

/// Every credential, by user then mechanism. Immutable once published.
pub type Credentials = BTreeMap<String, BTreeMap<ScramMechanism, ScramCredential>>;

#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ScramError {
    /// Not SCRAM-SHA-256 or SCRAM-SHA-512 (UNSUPPORTED_SASL_MECHANISM).
    #[error("Unknown SCRAM mechanism {0}")]
    UnknownMechanism(i8),
    /// Empty user name, iterations out of range, empty salt (UNACCEPTABLE_CREDENTIAL).
    #[error("{0}")]
    Unacceptable(String),
    /// Deleting a credential that does not exist, describing an unknown user
    /// (RESOURCE_NOT_FOUND).
    #[error("{0}")]
    NotFound(String),
    /// One user altered twice in a request, or described twice (DUPLICATE_RESOURCE).
    #[error("{0}")]
    Duplicate(String),
    #[error("SCRAM store i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("SCRAM store {path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    /// A stored credential row that does not decode (unknown mechanism, bad base64).
    #[error("undecodable SCRAM credential of {user}: {reason}")]
    BadRow { user: String, reason: String },
}

// Per-user results travel in the quorum's `Outcome` (Clone, PartialEq); an i/o error is
// compared and copied by kind and message.
impl Clone for ScramError {
    fn clone(&self) -> Self {
        match self {
            ScramError::UnknownMechanism(m) => ScramError::UnknownMechanism(*m),
            ScramError::Unacceptable(m) => ScramError::Unacceptable(m.clone()),
            ScramError::NotFound(m) => ScramError::NotFound(m.clone()),
            ScramError::Duplicate(m) => ScramError::Duplicate(m.clone()),
            ScramError::Io(e) => ScramError::Io(std::io::Error::new(e.kind(), e.to_string())),
            ScramError::Corrupt { path, reason } => ScramError::Corrupt {
                path: path.clone(),
                reason: reason.clone(),
            },
            ScramError::BadRow { user, reason } => ScramError::BadRow {
                user: user.clone(),
                reason: reason.clone(),
            },
        }
    }
}

impl PartialEq for ScramError {
    fn eq(&self, other: &Self) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
            && self.to_string() == other.to_string()
    }
}

/// One change of an AlterUserScramCredentials request, mechanisms still as wire codes.
#[derive(Debug, Clone)]
pub enum ScramChange {
    Delete {
        user: String,
        mechanism: i8,
    },
    Upsert {
        user: String,
        mechanism: i8,
        iterations: i32,
        salt: Vec<u8>,
        salted_password: Vec<u8>,
    },
}

impl ScramChange {
    pub fn user(&self) -> &str {
        match self {
            ScramChange::Delete { user, .. } | ScramChange::Upsert { user, .. } => user,
        }
    }
}

/// A change as it is applied: an upsert carries the keys already derived from the salted
/// password (the proposer derives them; apply is then a pure function of state and edit).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ScramEdit {
    Delete {
        user: String,
        mechanism: i8,
    },
    Upsert {
        user: String,
        mechanism: i8,
        iterations: i32,
        #[serde(with = "b64")]
        salt: Vec<u8>,
        #[serde(with = "b64")]
        stored_key: Vec<u8>,
        #[serde(with = "b64")]
        server_key: Vec<u8>,
    },
}

impl ScramEdit {
    /// Derives the stored keys of an upsert. A mechanism code that is not SCRAM's keeps the
    /// edit refusable (apply answers UnknownMechanism), so no key is derived for it.
    pub fn from_change(c: &ScramChange) -> ScramEdit {
        match c {
            ScramChange::Delete { user, mechanism } => ScramEdit::Delete {
                user: user.clone(),
                mechanism: *mechanism,
            },
            ScramChange::Upsert {
                user,
                mechanism,
                iterations,
                salt,
                salted_password,
            } => {
                let (stored_key, server_key) = match ScramMechanism::from_code(*mechanism) {
                    Some(mech) if !salted_password.is_empty() => {
                        let c = ScramCredential::from_salted_password(
                            mech,
                            salt,
                            salted_password,
                            *iterations,
                        );
                        (c.stored_key, c.server_key)
                    }
                    _ => (Vec::new(), Vec::new()),
                };
                ScramEdit::Upsert {
                    user: user.clone(),
                    mechanism: *mechanism,
                    iterations: *iterations,
                    salt: salt.clone(),
                    stored_key,
                    server_key,
                }
            }
        }
    }

    pub fn user(&self) -> &str {
        match self {
            ScramEdit::Delete { user, .. } | ScramEdit::Upsert { user, .. } => user,
        }
    }

    fn mechanism(&self) -> i8 {
        match self {
            ScramEdit::Delete { mechanism, .. } | ScramEdit::Upsert { mechanism, .. } => *mechanism,
        }
    }
}

mod b64 {
    use base64::engine::general_purpose::STANDARD as B64;
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&B64.encode(v))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        B64.decode(text).map_err(serde::de::Error::custom)
    }
}

/// One credential as a snapshot row (the file's and the Raft snapshot's form).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScramRow {
    user: String,
    mechanism: String,
    salt: String,
    stored_key: String,
    server_key: String,
    iterations: i32,
}

/// The rows of a credential set, by user then mechanism.
pub fn to_rows(creds: &Credentials) -> Vec<ScramRow> {
    creds
        .iter()
        .flat_map(|(u, m)| {
            m.iter().map(move |(mech, c)| ScramRow {
                user: u.clone(),
                mechanism: mech.name().into(),
                salt: B64.encode(&c.salt),
                stored_key: B64.encode(&c.stored_key),
                server_key: B64.encode(&c.server_key),
                iterations: c.iterations,
            })
        })
        .collect()
}

/// The credential set of `rows`; `Err` names what does not decode.
pub fn from_rows(rows: Vec<ScramRow>) -> Result<Credentials, ScramError> {
    let mut creds = Credentials::new();
    for r in rows {
        let bad = |reason: String| ScramError::BadRow {
            user: r.user.clone(),
            reason,
        };
        let mech = ScramMechanism::from_name(&r.mechanism)
            .ok_or_else(|| bad(format!("unknown mechanism {}", r.mechanism)))?;
        let d = |s: &str| B64.decode(s).map_err(|e| bad(e.to_string()));
        let cred = ScramCredential {
            salt: d(&r.salt)?,
            stored_key: d(&r.stored_key)?,
            server_key: d(&r.server_key)?,
            iterations: r.iterations,
        };
        creds.entry(r.user).or_default().insert(mech, cred);
    }
    Ok(creds)
}

/// What [`ScramStore::alter`] answers: per user, in the order users first appear.
pub type AlterResults = Vec<(String, Result<(), ScramError>)>;

/// The credential set of one data directory, or the replicated cluster's in-memory copy.
#[derive(Debug)]
pub struct ScramStore {
    /// `None` for the in-memory copy (the Raft log is the durable one).
    file: Option<AppendFile>,
    creds: Credentials,
}

impl ScramStore {
    pub fn open(dir: &Path) -> Result<ScramStore, ScramError> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(FILE);
        let (file, data) = AppendFile::open(&path)?;
        owner_only(&path)?;
        let corrupt = |reason: String| ScramError::Corrupt {
            path: path.clone(),
            reason,
        };
        let creds = if data.is_empty() {
            Credentials::new()
        } else {
            let rows: Vec<ScramRow> =
                serde_json::from_slice(&data).map_err(|e| corrupt(e.to_string()))?;
            from_rows(rows).map_err(|e| corrupt(e.to_string()))?
        };
        Ok(ScramStore {
            file: Some(file),
            creds,
        })
    }

    /// A store never written to disk (the Raft state machine's copy); it checks edits exactly
    /// as the durable one.
    pub fn in_memory(creds: Credentials) -> ScramStore {
        ScramStore { file: None, creds }
    }

    pub fn credentials(&self) -> &Credentials {
        &self.creds
    }

    /// Applies an AlterUserScramCredentials request with Kafka's checks; one result per
    /// user, in the order users first appear. A user's changes apply together or not at all;
    /// the new set is durable before any `Ok` is returned.
    pub fn alter(&mut self, changes: &[ScramChange]) -> AlterResults {
        let edits: Vec<ScramEdit> = changes.iter().map(ScramEdit::from_change).collect();
        self.apply_edits(&edits)
    }

    /// [`ScramStore::alter`] for edits whose keys are already derived (the replicated form).
    pub fn apply_edits(&mut self, edits: &[ScramEdit]) -> AlterResults {
        let mut order: Vec<String> = Vec::new();
        let mut by_user: BTreeMap<&str, Vec<&ScramEdit>> = BTreeMap::new();
        for c in edits {
            if !by_user.contains_key(c.user()) {
                order.push(c.user().to_string());
            }
            by_user.entry(c.user()).or_default().push(c);
        }
        let mut next = self.creds.clone();
        let mut results: BTreeMap<String, Result<(), ScramError>> = BTreeMap::new();
        for (user, cs) in &by_user {
            let r = Self::check_user(&self.creds, user, cs);
            if r.is_ok() {
                for c in cs {
                    let mech = ScramMechanism::from_code(c.mechanism()).expect("checked");
                    match c {
                        ScramEdit::Delete { .. } => {
                            if let Some(m) = next.get_mut(*user) {
                                m.remove(&mech);
                                if m.is_empty() {
                                    next.remove(*user);
                                }
                            }
                        }
                        ScramEdit::Upsert {
                            iterations,
                            salt,
                            stored_key,
                            server_key,
                            ..
                        } => {
                            next.entry(user.to_string()).or_default().insert(
                                mech,
                                ScramCredential {
                                    salt: salt.clone(),
                                    stored_key: stored_key.clone(),
                                    server_key: server_key.clone(),
                                    iterations: *iterations,
                                },
                            );
                        }
                    }
                }
            }
            results.insert(user.to_string(), r);
        }
        if next != self.creds {
            if let Err(e) = self.persist(&next) {
                let msg = e.to_string();
                for r in results.values_mut().filter(|r| r.is_ok()) {
                    *r = Err(ScramError::Io(std::io::Error::other(msg.clone())));
                }
            } else {
                self.creds = next;
            }
        }
        order
            .into_iter()
            .map(|u| {
                let r = results.remove(&u).expect("one result per user");
                (u, r)
            })
            .collect()
    }

    fn check_user(current: &Credentials, user: &str, cs: &[&ScramEdit]) -> Result<(), ScramError> {
        if user.is_empty() {
            return Err(ScramError::Unacceptable(
                "Username must not be empty".into(),
            ));
        }
        // Kafka refuses a user named more than once in one request, even for two mechanisms.
        if cs.len() > 1 {
            return Err(ScramError::Duplicate(
                "A user credential cannot be altered twice in the same request".into(),
            ));
        }
        for c in cs {
            let Some(mech) = ScramMechanism::from_code(c.mechanism()) else {
                return Err(ScramError::UnknownMechanism(c.mechanism()));
            };
            match c {
                ScramEdit::Delete { .. } => {
                    if !current.get(user).is_some_and(|m| m.contains_key(&mech)) {
                        return Err(ScramError::NotFound(
                            "Attempt to delete a user credential that does not exist".into(),
                        ));
                    }
                }
                ScramEdit::Upsert {
                    iterations,
                    salt,
                    stored_key,
                    ..
                } => {
                    if *iterations < MIN_ITERATIONS {
                        return Err(ScramError::Unacceptable("Too few iterations".into()));
                    }
                    if *iterations > MAX_ITERATIONS {
                        return Err(ScramError::Unacceptable("Too many iterations".into()));
                    }
                    // An empty salted password derives no keys (see `ScramEdit::from_change`).
                    if salt.is_empty() || stored_key.is_empty() {
                        return Err(ScramError::Unacceptable(
                            "Salt and salted password must not be empty".into(),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// DescribeUserScramCredentials: `None` = every user with a credential. Per requested user
    /// (in order) its (mechanism, iterations), RESOURCE_NOT_FOUND for users without any,
    /// DUPLICATE_RESOURCE for users named twice.
    pub fn describe(creds: &Credentials, users: Option<&[String]>) -> Vec<UserDescription> {
        let infos = |m: &BTreeMap<ScramMechanism, ScramCredential>| {
            m.iter().map(|(k, c)| (*k, c.iterations)).collect()
        };
        match users {
            None => creds
                .iter()
                .map(|(u, m)| (u.clone(), Ok(infos(m))))
                .collect(),
            Some(users) => {
                let mut out = Vec::new();
                for (i, u) in users.iter().enumerate() {
                    if users[..i].contains(u) {
                        continue;
                    }
                    let r = if users.iter().filter(|x| *x == u).count() > 1 {
                        Err(ScramError::Duplicate(
                            "Cannot describe SCRAM credentials for the same user twice in a single request"
                                .into(),
                        ))
                    } else {
                        match creds.get(u) {
                            Some(m) => Ok(infos(m)),
                            None => Err(ScramError::NotFound(
                                "Attempt to describe nonexistent user.".into(),
                            )),
                        }
                    };
                    out.push((u.clone(), r));
                }
                out
            }
        }
    }

    fn persist(&mut self, creds: &Credentials) -> Result<(), ScramError> {
        let Some(file) = &mut self.file else {
            return Ok(());
        };
        let bytes = serde_json::to_vec_pretty(&to_rows(creds)).map_err(std::io::Error::other)?;
        file.replace(&bytes)?;
        owner_only(file.path())?;
        Ok(())
    }
}

/// Keys derived from passwords are secrets too (a leaked ServerKey lets a host pose as the
/// broker): the file is readable by its owner only.
fn owner_only(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

/// The store shared by a broker: writers serialize on the mutex, readers load the snapshot.
#[derive(Debug)]
pub struct ScramRegistry {
    writer: Mutex<ScramStore>,
    snapshot: ArcSwap<Credentials>,
}

impl ScramRegistry {
    /// No credentials until the first publication.
    pub fn empty() -> ScramRegistry {
        let store = ScramStore::in_memory(Default::default());
        ScramRegistry {
            snapshot: ArcSwap::from_pointee(store.credentials().clone()),
            writer: Mutex::new(store),
        }
    }

    pub fn open(dir: &Path) -> Result<ScramRegistry, ScramError> {
        let store = ScramStore::open(dir)?;
        let snapshot = ArcSwap::from_pointee(store.credentials().clone());
        Ok(ScramRegistry {
            writer: Mutex::new(store),
            snapshot,
        })
    }

    /// The current credentials: a lock-free load, for the authentication path.
    pub fn snapshot(&self) -> Arc<Credentials> {
        self.snapshot.load_full()
    }

    /// Publishes the replicated credential set (cluster mode: the Raft driver owns the
    /// credentials; the local file is not used).
    pub fn publish(&self, creds: Credentials) {
        self.snapshot.store(Arc::new(creds));
    }

    pub fn lookup(&self, user: &str, mech: ScramMechanism) -> Option<ScramCredential> {
        self.snapshot
            .load()
            .get(user)
            .and_then(|m| m.get(&mech))
            .cloned()
    }

    /// [`ScramStore::alter`], then publishes the new snapshot. Blocks on the fsync: call it
    /// off the engine cores' hot path.
    pub fn alter(&self, changes: &[ScramChange]) -> Vec<(String, Result<(), ScramError>)> {
        let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let r = w.alter(changes);
        self.snapshot.store(Arc::new(w.credentials().clone()));
        r
    }

    pub fn describe(&self, users: Option<&[String]>) -> Vec<UserDescription> {
        ScramStore::describe(&self.snapshot(), users)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upsert(user: &str, mech: ScramMechanism, pw: &str, iterations: i32) -> ScramChange {
        let salt = b"0123456789abcdef".to_vec();
        ScramChange::Upsert {
            user: user.into(),
            mechanism: mech.code(),
            iterations,
            salted_password: mech.salted_password(pw.as_bytes(), &salt, iterations as u32),
            salt,
        }
    }

    /// RFC 7677's SCRAM-SHA-256 example: user "user", password "pencil".
    #[test]
    fn derived_keys_match_the_rfc_7677_example() {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let c = ScramCredential::from_password(ScramMechanism::Sha256, "pencil", &salt, 4096);
        let salted = ScramMechanism::Sha256.salted_password(b"pencil", &salt, 4096);
        let client_key = ScramMechanism::Sha256.hmac(&salted, b"Client Key");
        let auth = "n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let sig = ScramMechanism::Sha256.hmac(&c.stored_key, auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
        assert_eq!(
            B64.encode(proof),
            "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        let server_sig = ScramMechanism::Sha256.hmac(&c.server_key, auth.as_bytes());
        assert_eq!(
            B64.encode(server_sig),
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        assert!(c.matches_password(ScramMechanism::Sha256, "pencil"));
        assert!(!c.matches_password(ScramMechanism::Sha256, "pencil2"));
    }

    #[test]
    fn credentials_survive_reopen_and_never_hold_the_password() {
        let dir = tempfile::tempdir().unwrap();
        let reg = ScramRegistry::open(dir.path()).unwrap();
        let r = reg.alter(&[
            upsert("alice", ScramMechanism::Sha512, "s3cret-pw", 4096),
            upsert("bob", ScramMechanism::Sha256, "hunter2", 4096),
        ]);
        assert!(r.iter().all(|(_, r)| r.is_ok()), "{r:?}");
        assert_eq!(r.len(), 2);
        let r = reg.alter(&[upsert("alice", ScramMechanism::Sha256, "s3cret-pw", 8192)]);
        assert!(r[0].1.is_ok());
        let text = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert!(!text.contains("s3cret") && !text.contains("hunter2"));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        drop(reg);
        let reg = ScramRegistry::open(dir.path()).unwrap();
        let c = reg.lookup("alice", ScramMechanism::Sha256).unwrap();
        assert_eq!(c.iterations, 8192);
        assert!(c.matches_password(ScramMechanism::Sha256, "s3cret-pw"));
        let d = reg.describe(None);
        assert_eq!(d.len(), 2);
        assert_eq!(
            d[0].1.as_ref().unwrap(),
            &vec![
                (ScramMechanism::Sha256, 8192),
                (ScramMechanism::Sha512, 4096)
            ]
        );
    }

    #[test]
    fn alter_applies_kafkas_checks_per_user_all_or_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let reg = ScramRegistry::open(dir.path()).unwrap();
        let r = reg.alter(&[
            upsert("few", ScramMechanism::Sha256, "p", 4095),
            upsert("many", ScramMechanism::Sha256, "p", 16385),
            ScramChange::Delete {
                user: "ghost".into(),
                mechanism: 2,
            },
            ScramChange::Delete {
                user: "badmech".into(),
                mechanism: 7,
            },
            upsert("dup", ScramMechanism::Sha256, "p", 4096),
            upsert("dup", ScramMechanism::Sha256, "q", 4096),
            upsert("", ScramMechanism::Sha256, "p", 4096),
            // Two mechanisms of one user in one request: refused, nothing applied.
            upsert("carol", ScramMechanism::Sha512, "p", 4096),
            upsert("carol", ScramMechanism::Sha256, "p", 4096),
        ]);
        let kinds: Vec<(&str, &str)> = r
            .iter()
            .map(|(u, r)| {
                let k = match r {
                    Ok(()) => "ok",
                    Err(ScramError::Unacceptable(_)) => "unacceptable",
                    Err(ScramError::NotFound(_)) => "notfound",
                    Err(ScramError::UnknownMechanism(_)) => "mechanism",
                    Err(ScramError::Duplicate(_)) => "duplicate",
                    Err(_) => "other",
                };
                (u.as_str(), k)
            })
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("few", "unacceptable"),
                ("many", "unacceptable"),
                ("ghost", "notfound"),
                ("badmech", "mechanism"),
                ("dup", "duplicate"),
                ("", "unacceptable"),
                ("carol", "duplicate"),
            ]
        );
        assert!(reg.snapshot().is_empty());
        let d = reg.describe(Some(&["nobody".to_string()]));
        assert!(matches!(d[0].1, Err(ScramError::NotFound(_))));
        reg.alter(&[upsert("carol", ScramMechanism::Sha512, "p", 4096)]);
        let r = reg.alter(&[ScramChange::Delete {
            user: "carol".into(),
            mechanism: 2,
        }]);
        assert!(r[0].1.is_ok());
        assert!(ScramRegistry::open(dir.path())
            .unwrap()
            .snapshot()
            .is_empty());
    }
}
