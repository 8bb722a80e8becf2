//! `kmirror serve` settings: a TOML file (every key optional, see `kmirror.toml`) overridden
//! by command-line flags.

use std::path::{Path, PathBuf};

use kmirror_net::listeners::parse_listeners;
use kmirror_net::{ListenerSpec, TlsFiles};
use serde::Deserialize;

/// The `serve` configuration. Field names are the TOML keys.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ServeConfig {
    /// HOST:PORT to listen on; the host is advertised to clients. Shorthand for one
    /// PLAINTEXT listener, used when `listeners` is empty.
    pub listen: String,
    /// Kafka's `listeners`: comma-separated `PROTOCOL://HOST:PORT` (PLAINTEXT, SSL,
    /// SASL_PLAINTEXT, SASL_SSL); empty = `listen` as the one PLAINTEXT listener.
    pub listeners: String,
    /// PEM certificate chain of the SSL/SASL_SSL listeners.
    pub tls_cert: String,
    /// PEM (PKCS#8) private key of `tls_cert`.
    pub tls_key: String,
    /// PEM CA certificates of accepted client certificates; non-empty = mutual TLS required on SSL
    /// listeners (not SASL_SSL, as in Kafka).
    pub tls_client_ca: String,
    /// Where logs and metadata live.
    pub data_dir: PathBuf,
    pub node_id: i32,
    /// Executor threads, one per core; 0 = all online CPUs.
    pub cores: usize,
    /// Pin each executor to its own CPU.
    pub pin_cores: bool,
    /// "spread", "hash" or "topic": how partitions are assigned to cores (a mirror's
    /// `mirror.core.*` settings override it for its topics).
    pub partition_assignment: String,
    /// Prometheus metrics endpoint (HOST:PORT); empty = off.
    pub metrics: String,
    /// `socket.request.max.bytes`: larger requests close the connection unread.
    pub socket_request_max_bytes: usize,
    /// Create unknown topics on Metadata requests (Kafka's auto.create.topics.enable).
    pub auto_create_topics: bool,
    /// Partitions of auto-created topics and of CreateTopics without a count.
    pub num_partitions: i32,
    /// Kafka's `group.initial.rebalance.delay.ms`: how long a new classic group waits for
    /// more members before its first rebalance (0, as Kafka's shipped server.properties).
    pub group_initial_rebalance_delay_ms: i32,
    /// Kafka's `offsets.topic.num.partitions`: partitions `__consumer_offsets` is described
    /// with in Metadata (kmirror keeps offsets in one store).
    pub offsets_topic_num_partitions: i32,
    /// Kafka's `transaction.state.log.num.partitions`, likewise for `__transaction_state`.
    pub transaction_state_log_num_partitions: i32,
    /// Kafka's `offsets.topic.replication.factor` (default 3; at most the brokers there are
    /// when `__consumer_offsets` is created).
    pub offsets_topic_replication_factor: i16,
    /// Kafka's `transaction.state.log.replication.factor`, likewise for `__transaction_state`.
    pub transaction_state_log_replication_factor: i16,
    /// Kafka's `offsets.retention.minutes` (default 10080, 7 days): committed offsets of an
    /// empty group expire this long after it became empty (or after the commit).
    pub offsets_retention_minutes: i64,
    /// Kafka's `offsets.retention.check.interval.ms` (default 600000).
    pub offsets_retention_check_interval_ms: i64,
    /// Kafka's `group.consumer.migration.policy`: `bidirectional` (default), `upgrade`,
    /// `downgrade` or `disabled`: whether non-empty groups convert between the classic and the
    /// consumer rebalance protocol while members of both kinds come and go.
    pub group_consumer_migration_policy: String,
    /// Seconds between retention passes over each core's partitions.
    pub retention_check_secs: u64,
    /// Kafka's log.cleaner.backoff.ms: pause between each core's log compaction rounds.
    pub log_cleaner_backoff_ms: u64,
    /// Kafka's log.cleaner.io.max.bytes.per.second: the cleaner thread's I/O ceiling
    /// (0 = unlimited).
    pub log_cleaner_io_max_bytes_per_second: u64,
    /// Log filter (RUST_LOG syntax) when RUST_LOG is unset.
    pub log_level: String,
    /// `mirror.version` feature level: 0 turns the mirror APIs off (UNSUPPORTED_VERSION).
    pub mirror_version: i16,
    /// Ceiling on mirror fetch traffic for the whole broker, bytes/s (0 = unlimited).
    pub mirror_byte_rate: u64,
    /// Enforce ACLs (Kafka's StandardAuthorizer semantics); false allows every request.
    pub authorizer: bool,
    /// Principals that bypass ACLs, semicolon-separated (`User:admin;User:ops`).
    pub super_users: String,
    /// Allow a request on a resource no ACL mentions (Kafka's allow.everyone.if.no.acl.found).
    pub allow_everyone_if_no_acl_found: bool,
    /// SASL mechanisms offered on SASL_* listeners: any of SCRAM-SHA-512, SCRAM-SHA-256,
    /// PLAIN, OAUTHBEARER, comma-separated.
    pub sasl_mechanisms: String,
    /// JWKS (JSON Web Key Set) file whose keys sign accepted OAUTHBEARER tokens.
    pub sasl_oauthbearer_jwks_file: Option<PathBuf>,
    /// Required `iss` claim of OAUTHBEARER tokens (unset: not checked).
    pub sasl_oauthbearer_expected_issuer: Option<String>,
    /// Required `aud` claim of OAUTHBEARER tokens (unset: not checked).
    pub sasl_oauthbearer_expected_audience: Option<String>,
    /// KIP-368: a SASL session lasts at most this long, then the client must re-authenticate
    /// (0 = no limit but a token's own expiry).
    pub connections_max_reauth_ms: i64,
    /// The controller listener of a clustered node, `HOST:PORT` (issue 12).
    pub controller_listen: String,
    /// Kafka's `inter.broker.listener.name`: which of this node's listeners its peers connect
    /// to (replica fetches, transaction markers, forwarded requests). kmirror names each
    /// listener by its protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL). Empty = the first
    /// listener, in the clear.
    pub inter_broker_listener_name: String,
    /// Kafka's `sasl.mechanism.inter.broker.protocol`: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
    /// (empty = the first of `sasl_mechanisms`).
    pub inter_broker_sasl_mechanism: String,
    /// The broker's own SASL user on the inter-broker listener (list it in `super_users`).
    pub inter_broker_sasl_username: String,
    /// File holding that user's password (its first line).
    pub inter_broker_sasl_password_file: String,
    /// PEM CA certificates the peers' TLS certificates are checked against (inter-broker
    /// listener and controller listener); empty = the webpki roots. The peer's advertised
    /// host must be in its certificate.
    pub inter_broker_tls_ca: String,
    /// Kafka's controller listener with protocol SSL: the Raft transport between voters uses
    /// mutual TLS with `tls_cert`/`tls_key`; a peer must present a certificate signed by
    /// `inter_broker_tls_ca`.
    pub controller_listener_tls: bool,
    /// The metadata quorum, Kafka's `controller.quorum.voters` format `ID@HOST:PORT,...`;
    /// empty = a single node, as always.
    pub quorum: String,
    /// Kafka's `broker.session.timeout.ms`: a clustered broker the active controller has not
    /// heard from for this long is fenced (its leaderships move).
    pub broker_session_timeout_ms: u64,
    /// Kafka's `default.replication.factor` (a cluster; a single node always uses 1).
    pub default_replication_factor: i16,
    /// Kafka's `replica.lag.time.max.ms`: a follower not caught up with its leader for this
    /// long leaves the ISR.
    pub replica_lag_time_max_ms: u64,
    /// Kafka's `auto.leader.rebalance.enable`: the active controller elects preferred
    /// leaders back every `leader_imbalance_check_interval_seconds`.
    pub auto_leader_rebalance_enable: bool,
    /// Kafka's `leader.imbalance.check.interval.seconds`.
    pub leader_imbalance_check_interval_seconds: u64,
    /// Kafka's `leader.imbalance.per.broker.percentage`: accepted, unused (Kafka 4.1's KRaft
    /// controller balances every partition whose preferred replica can lead, whatever the
    /// share).
    pub leader_imbalance_per_broker_percentage: u32,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: "127.0.0.1:9092".into(),
            listeners: String::new(),
            tls_cert: String::new(),
            tls_key: String::new(),
            tls_client_ca: String::new(),
            data_dir: PathBuf::from("./kmirror-data"),
            node_id: 1,
            cores: 0,
            pin_cores: true,
            partition_assignment: "spread".into(),
            metrics: String::new(),
            socket_request_max_bytes: 100 << 20,
            auto_create_topics: true,
            num_partitions: 1,
            group_initial_rebalance_delay_ms: 0,
            offsets_topic_num_partitions: 50,
            transaction_state_log_num_partitions: 50,
            offsets_topic_replication_factor: 3,
            transaction_state_log_replication_factor: 3,
            offsets_retention_minutes: 10_080,
            offsets_retention_check_interval_ms: 600_000,
            group_consumer_migration_policy: "bidirectional".into(),
            retention_check_secs: 30,
            log_cleaner_backoff_ms: 15_000,
            log_cleaner_io_max_bytes_per_second: 64 << 20,
            log_level: "info".into(),
            mirror_version: 1,
            mirror_byte_rate: 0,
            authorizer: false,
            super_users: String::new(),
            allow_everyone_if_no_acl_found: false,
            sasl_mechanisms: "SCRAM-SHA-512,SCRAM-SHA-256".into(),
            sasl_oauthbearer_jwks_file: None,
            sasl_oauthbearer_expected_issuer: None,
            sasl_oauthbearer_expected_audience: None,
            connections_max_reauth_ms: 0,
            controller_listen: String::new(),
            inter_broker_listener_name: String::new(),
            inter_broker_sasl_mechanism: String::new(),
            inter_broker_sasl_username: String::new(),
            inter_broker_sasl_password_file: String::new(),
            inter_broker_tls_ca: String::new(),
            controller_listener_tls: false,
            quorum: String::new(),
            broker_session_timeout_ms: 9000,
            default_replication_factor: 1,
            replica_lag_time_max_ms: 30_000,
            auto_leader_rebalance_enable: true,
            leader_imbalance_check_interval_seconds: 300,
            leader_imbalance_per_broker_percentage: 10,
        }
    }
}

/// Errors reading the config.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config {path}: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("invalid setting: {0}")]
    Invalid(String),
}

impl ServeConfig {
    pub(crate) fn load(path: &Path) -> Result<ServeConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.to_path_buf(),
            source,
        })
    }

    /// The listeners: `listeners` when set (it wins over `listen`), else `listen` as one
    /// PLAINTEXT listener.
    pub(crate) fn listener_specs(&self) -> Result<Vec<ListenerSpec>, ConfigError> {
        if self.listeners.trim().is_empty() {
            ListenerSpec::plaintext(&self.listen)
                .map(|l| vec![l])
                .map_err(|e| ConfigError::Invalid(format!("listen: {e}")))
        } else {
            parse_listeners(&self.listeners)
                .map_err(|e| ConfigError::Invalid(format!("listeners: {e}")))
        }
    }

    /// The TLS files (empty keys = not set).
    pub(crate) fn tls_files(&self) -> TlsFiles {
        let path = |s: &str| (!s.trim().is_empty()).then(|| PathBuf::from(s.trim()));
        TlsFiles {
            cert: path(&self.tls_cert),
            key: path(&self.tls_key),
            client_ca: path(&self.tls_client_ca),
        }
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let listeners = self.listener_specs()?;
        let tls = self.tls_files();
        if let Some(l) = listeners.iter().find(|l| l.protocol.uses_tls()) {
            if tls.cert.is_none() || tls.key.is_none() {
                return Err(ConfigError::Invalid(format!(
                    "listener {l} uses TLS: set tls_cert and tls_key (--tls-cert, --tls-key)"
                )));
            }
        }
        if kmirror_engine::Assignment::parse(&self.partition_assignment).is_none() {
            return Err(ConfigError::Invalid(format!(
                "partition_assignment must be \"spread\", \"hash\" or \"topic\", got \"{}\"",
                self.partition_assignment
            )));
        }
        if kmirror_control::group::MigrationPolicy::parse(&self.group_consumer_migration_policy)
            .is_none()
        {
            return Err(ConfigError::Invalid(format!(
                "group_consumer_migration_policy must be bidirectional, upgrade, downgrade or disabled, got \"{}\"",
                self.group_consumer_migration_policy
            )));
        }
        if self.group_initial_rebalance_delay_ms < 0 {
            return Err(ConfigError::Invalid(
                "group_initial_rebalance_delay_ms must not be negative".into(),
            ));
        }
        if self.offsets_topic_num_partitions < 1 || self.transaction_state_log_num_partitions < 1 {
            return Err(ConfigError::Invalid(
                "offsets_topic_num_partitions and transaction_state_log_num_partitions must be at least 1".into(),
            ));
        }
        if self.offsets_topic_replication_factor < 1
            || self.transaction_state_log_replication_factor < 1
        {
            return Err(ConfigError::Invalid(
                "offsets_topic_replication_factor and transaction_state_log_replication_factor must be at least 1".into(),
            ));
        }
        if self.offsets_retention_minutes < 1 || self.offsets_retention_check_interval_ms < 1 {
            return Err(ConfigError::Invalid(
                "offsets_retention_minutes and offsets_retention_check_interval_ms must be at least 1".into(),
            ));
        }
        if self.num_partitions < 1 {
            return Err(ConfigError::Invalid(
                "num_partitions must be at least 1".into(),
            ));
        }
        if self.socket_request_max_bytes < 1024 {
            return Err(ConfigError::Invalid(
                "socket_request_max_bytes must be at least 1024".into(),
            ));
        }
        if !(0..=1).contains(&self.mirror_version) {
            return Err(ConfigError::Invalid(format!(
                "mirror_version must be 0 or 1, got {}",
                self.mirror_version
            )));
        }
        if self.connections_max_reauth_ms < 0 {
            return Err(ConfigError::Invalid(
                "connections_max_reauth_ms must not be negative".into(),
            ));
        }
        self.sasl_config()?;
        self.authz()?;
        self.quorum_voters()?;
        self.inter_broker()?;
        self.controller_tls()?;
        Ok(())
    }

    /// The controller listener's mutual TLS, when `controller_listener_tls` asks for it.
    pub(crate) fn controller_tls(
        &self,
    ) -> Result<Option<kmirror_cluster::transport::ControllerTls>, ConfigError> {
        if !self.controller_listener_tls {
            return Ok(None);
        }
        let (cert, key, ca) = (
            self.tls_cert.trim(),
            self.tls_key.trim(),
            self.inter_broker_tls_ca.trim(),
        );
        if self.quorum.trim().is_empty() {
            return Err(ConfigError::Invalid(
                "controller_listener_tls is set but quorum is not".into(),
            ));
        }
        if cert.is_empty() || key.is_empty() || ca.is_empty() {
            return Err(ConfigError::Invalid(
                "controller_listener_tls needs tls_cert, tls_key and inter_broker_tls_ca (the CA \
                 peers' certificates are signed by)"
                    .into(),
            ));
        }
        kmirror_cluster::transport::ControllerTls::from_files(
            cert.as_ref(),
            key.as_ref(),
            ca.as_ref(),
        )
        .map(Some)
        .map_err(|e| ConfigError::Invalid(format!("controller_listener_tls: {e}")))
    }

    /// The inter-broker listener's name (`None`: the first listener) and the broker's client
    /// security towards it: TLS (trusting `inter_broker_tls_ca`, presenting this node's own
    /// certificate as Kafka's brokers present their keystore) and SASL as its protocol says.
    pub(crate) fn inter_broker(
        &self,
    ) -> Result<
        (
            Option<String>,
            kmirror_mirror::client::security::ClientSecurity,
        ),
        ConfigError,
    > {
        use kmirror_mirror::client::security::{keys, ClientSecurity};
        let listeners = self.listener_specs()?;
        let named = self.inter_broker_listener_name.trim();
        if named.is_empty() && self.quorum.trim().is_empty() {
            // One node: no peers, nothing to connect to.
            return Ok((None, ClientSecurity::plaintext()));
        }
        let listener = if named.is_empty() {
            &listeners[0]
        } else {
            listeners
                .iter()
                .find(|l| l.name.eq_ignore_ascii_case(named))
                .ok_or_else(|| {
                    ConfigError::Invalid(format!(
                        "inter_broker_listener_name {named} is not among the listeners ({}); \
                         a listener's name is its protocol",
                        listeners
                            .iter()
                            .map(|l| l.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?
        };
        let proto = listener.protocol;
        let mut props = std::collections::BTreeMap::new();
        props.insert(keys::SECURITY_PROTOCOL.to_string(), proto.to_string());
        let file = |key: &str, path: &str| {
            std::fs::read_to_string(path.trim())
                .map_err(|e| ConfigError::Invalid(format!("{key}: cannot read '{path}': {e}")))
        };
        if proto.uses_tls() {
            let ca = self.inter_broker_tls_ca.trim();
            if !ca.is_empty() {
                props.insert(keys::TRUSTSTORE_LOCATION.into(), ca.into());
            }
            if !self.tls_cert.trim().is_empty() && !self.tls_key.trim().is_empty() {
                props.insert(
                    keys::KEYSTORE_CERTIFICATE_CHAIN.into(),
                    file("tls_cert", &self.tls_cert)?,
                );
                props.insert(keys::KEYSTORE_KEY.into(), file("tls_key", &self.tls_key)?);
            }
        }
        if proto.uses_sasl() {
            let mechanism = match self.inter_broker_sasl_mechanism.trim() {
                "" => self
                    .sasl_config()?
                    .mechanisms
                    .first()
                    .map(|m| m.name().to_string())
                    .unwrap_or_default(),
                m => m.to_ascii_uppercase(),
            };
            if !["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"].contains(&mechanism.as_str()) {
                return Err(ConfigError::Invalid(format!(
                    "inter_broker_sasl_mechanism {mechanism} is not supported for the \
                     inter-broker listener (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"
                )));
            }
            let user = self.inter_broker_sasl_username.trim();
            let pw_file = self.inter_broker_sasl_password_file.trim();
            if user.is_empty() || pw_file.is_empty() {
                return Err(ConfigError::Invalid(format!(
                    "the inter-broker listener {} uses SASL: set inter_broker_sasl_username and \
                     inter_broker_sasl_password_file (--inter-broker-sasl-username, \
                     --inter-broker-sasl-password-file)",
                    listener.name
                )));
            }
            let password = file("inter_broker_sasl_password_file", pw_file)?;
            let password = password.lines().next().unwrap_or("").to_string();
            if password.is_empty() {
                return Err(ConfigError::Invalid(format!(
                    "inter_broker_sasl_password_file {pw_file} is empty"
                )));
            }
            props.insert(keys::SASL_MECHANISM.into(), mechanism);
            props.insert(keys::SASL_USERNAME.into(), user.into());
            props.insert(keys::SASL_PASSWORD.into(), password);
        }
        let security = ClientSecurity::from_properties(&props)
            .map_err(|e| ConfigError::Invalid(format!("inter-broker client: {e}")))?;
        Ok(((!named.is_empty()).then(|| listener.name.clone()), security))
    }

    /// The metadata quorum's voters; empty for a single node. With a quorum, this node needs
    /// a controller listener: on its voter address's port if it is a voter, anywhere if it
    /// is not (it then joins the running cluster as an observer).
    pub(crate) fn quorum_voters(&self) -> Result<Vec<kmirror_cluster::Voter>, ConfigError> {
        if self.quorum.trim().is_empty() {
            if !self.controller_listen.trim().is_empty() {
                return Err(ConfigError::Invalid(
                    "controller_listen is set but quorum is not (--quorum ID@HOST:PORT,...)".into(),
                ));
            }
            return Ok(Vec::new());
        }
        let voters = kmirror_cluster::parse_quorum(&self.quorum)
            .map_err(|e| ConfigError::Invalid(format!("quorum: {e}")))?;
        let listen = self.controller_listen.trim();
        let port = |a: &str| a.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok());
        if listen.is_empty() {
            return Err(ConfigError::Invalid(
                "a quorum needs controller_listen (--controller-listen HOST:PORT)".into(),
            ));
        }
        let Some(listen_port) = port(listen) else {
            return Err(ConfigError::Invalid(format!(
                "controller_listen '{listen}' is not HOST:PORT"
            )));
        };
        // A node that is not among the voters joins the running cluster as an observer;
        // the voters are then only where it asks to join.
        if let Some(me) = voters
            .iter()
            .find(|v| i64::from(self.node_id) == v.id as i64)
        {
            if Some(listen_port) != port(&me.addr) {
                return Err(ConfigError::Invalid(format!(
                    "controller_listen {listen} is not on the port of this node's voter \
                     address {me}"
                )));
            }
        } else if self.node_id <= 0 {
            return Err(ConfigError::Invalid(format!(
                "node_id {} cannot join a quorum (ids are positive)",
                self.node_id
            )));
        }
        Ok(voters)
    }

    /// The authorizer settings.
    pub(crate) fn authz(&self) -> Result<kmirror_control::authz::AuthzConfig, ConfigError> {
        use kmirror_control::authz::AuthzConfig;
        Ok(AuthzConfig {
            enabled: self.authorizer,
            super_users: AuthzConfig::parse_super_users(&self.super_users)
                .map_err(|e| ConfigError::Invalid(format!("super_users: {e}")))?,
            allow_everyone_if_no_acl_found: self.allow_everyone_if_no_acl_found,
        })
    }

    /// The SASL settings of the broker.
    pub(crate) fn sasl_config(&self) -> Result<kmirror_net::sasl::SaslConfig, ConfigError> {
        use kmirror_net::sasl::{Mechanism, OAuthSettings, SaslConfig};
        let mechanisms = SaslConfig::parse_mechanisms(&self.sasl_mechanisms)
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if mechanisms.contains(&Mechanism::OAuthBearer) && self.sasl_oauthbearer_jwks_file.is_none()
        {
            return Err(ConfigError::Invalid(
                "OAUTHBEARER in sasl_mechanisms needs sasl_oauthbearer_jwks_file".into(),
            ));
        }
        Ok(SaslConfig {
            mechanisms,
            oauth: OAuthSettings {
                jwks_file: self.sasl_oauthbearer_jwks_file.clone(),
                expected_issuer: self.sasl_oauthbearer_expected_issuer.clone(),
                expected_audience: self.sasl_oauthbearer_expected_audience.clone(),
            },
            reauth_ms: self.connections_max_reauth_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_example_config_parses_and_matches_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("kmirror.toml");
        let c = ServeConfig::load(&path).unwrap();
        c.validate().unwrap();
        let d = ServeConfig::default();
        assert_eq!(c.listen, d.listen);
        assert_eq!(c.socket_request_max_bytes, d.socket_request_max_bytes);
        assert_eq!(c.partition_assignment, d.partition_assignment);
        assert_eq!(c.replica_lag_time_max_ms, d.replica_lag_time_max_ms);
        assert_eq!(
            (
                c.auto_leader_rebalance_enable,
                c.leader_imbalance_check_interval_seconds,
                c.leader_imbalance_per_broker_percentage
            ),
            (true, 300, 10)
        );
        assert_eq!(c.listeners, d.listeners);
        assert_eq!(c.tls_files(), TlsFiles::default());
        assert_eq!(
            c.listener_specs().unwrap()[0].to_string(),
            "PLAINTEXT://127.0.0.1:9092"
        );
    }

    #[test]
    fn listeners_win_over_listen_and_tls_listeners_need_cert_and_key() {
        let c: ServeConfig = toml::from_str(
            "listen = \"127.0.0.1:1\"\nlisteners = \"PLAINTEXT://127.0.0.1:2,SASL_PLAINTEXT://:3\"",
        )
        .unwrap();
        c.validate().unwrap();
        let l = c.listener_specs().unwrap();
        assert_eq!(
            l.iter().map(|l| l.to_string()).collect::<Vec<_>>(),
            ["PLAINTEXT://127.0.0.1:2", "SASL_PLAINTEXT://:3"]
        );
        let c: ServeConfig = toml::from_str("listeners = \"SSL://127.0.0.1:0\"").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("tls_cert and tls_key"), "{e}");
        let c: ServeConfig = toml::from_str(
            "listeners = \"SSL://127.0.0.1:0\"\ntls_cert = \"c.pem\"\ntls_key = \"k.pem\"",
        )
        .unwrap();
        c.validate().unwrap();
        assert!(!c.tls_files().mutual());
        let c: ServeConfig = toml::from_str("listeners = \"SSL:/x\"").unwrap();
        assert!(c.validate().is_err());
    }

    #[test]
    fn unknown_keys_and_bad_values_are_reported() {
        assert!(toml::from_str::<ServeConfig>("lissen = \"x\"").is_err());
        let c: ServeConfig = toml::from_str("partition_assignment = \"random\"").unwrap();
        assert!(c.validate().is_err());
        let c: ServeConfig = toml::from_str("sasl_mechanisms = \"SCRAM-SHA-1\"").unwrap();
        assert!(c.validate().is_err());
        let c: ServeConfig = toml::from_str("sasl_mechanisms = \"OAUTHBEARER\"").unwrap();
        assert!(c.validate().is_err(), "OAUTHBEARER needs a JWKS file");
        let c: ServeConfig = toml::from_str("sasl_mechanisms = \"PLAIN, scram-sha-256\"").unwrap();
        let names: Vec<&str> = c
            .sasl_config()
            .unwrap()
            .mechanisms
            .iter()
            .map(|m| m.name())
            .collect();
        assert_eq!(names, ["PLAIN", "SCRAM-SHA-256"]);
        let c: ServeConfig = toml::from_str("authorizer = true\nsuper_users = \"admin\"").unwrap();
        assert!(c.validate().is_err());
        let c: ServeConfig =
            toml::from_str("authorizer = true\nsuper_users = \"User:admin;User:ops\"").unwrap();
        assert_eq!(c.authz().unwrap().super_users, ["User:admin", "User:ops"]);
    }

    #[test]
    fn quorum_settings_are_validated() {
        let q = "quorum = \"1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097\"\n";
        let ok: ServeConfig = toml::from_str(&format!(
            "{q}node_id = 2\ncontroller_listen = \"0.0.0.0:9095\""
        ))
        .unwrap();
        ok.validate().unwrap();
        assert_eq!(ok.quorum_voters().unwrap().len(), 3);
        // Not a voter: it joins as an observer, with a controller listener of its own.
        let join: ServeConfig = toml::from_str(&format!(
            "{q}node_id = 4\ncontroller_listen = \"0.0.0.0:9099\""
        ))
        .unwrap();
        join.validate().unwrap();
        for (extra, why) in [
            ("node_id = 4", "needs controller_listen"),
            ("node_id = 2", "needs controller_listen"),
            (
                "node_id = 2\ncontroller_listen = \"0.0.0.0:9093\"",
                "not on the port",
            ),
            ("node_id = 2\ncontroller_listen = \"nope\"", "not HOST:PORT"),
        ] {
            let c: ServeConfig = toml::from_str(&format!("{q}{extra}")).unwrap();
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(why), "{extra}: {e}");
        }
        let c: ServeConfig = toml::from_str("replica_lag_time_max_ms = 5000").unwrap();
        assert_eq!(c.replica_lag_time_max_ms, 5000);
        let c: ServeConfig = toml::from_str("quorum = \"1@h\"").unwrap();
        assert!(c.validate().unwrap_err().to_string().contains("no :PORT"));
        let c: ServeConfig = toml::from_str("controller_listen = \"127.0.0.1:9093\"").unwrap();
        assert!(c.validate().is_err());
        // No quorum: a single node, exactly as before.
        let c = ServeConfig::default();
        assert!(c.quorum_voters().unwrap().is_empty());
    }

    #[test]
    fn inter_broker_settings_are_validated() {
        use kmirror_mirror::client::security::SecurityProtocol;
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "s3cret\n").unwrap();
        let q =
            "quorum = \"1@127.0.0.1:9093\"\nnode_id = 1\ncontroller_listen = \"127.0.0.1:9093\"\n\
                 listeners = \"PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9094\"\n";
        // Default: the first listener, in the clear.
        let c: ServeConfig = toml::from_str(q).unwrap();
        let (name, sec) = c.inter_broker().unwrap();
        assert_eq!((name, sec.protocol()), (None, SecurityProtocol::Plaintext));
        for (extra, why) in [
            ("inter_broker_listener_name = \"SSL\"", "not among the listeners"),
            (
                "inter_broker_listener_name = \"SASL_PLAINTEXT\"",
                "set inter_broker_sasl_username",
            ),
            (
                "inter_broker_listener_name = \"SASL_PLAINTEXT\"\ninter_broker_sasl_username = \"kmirror\"\n\
                 inter_broker_sasl_password_file = \"/nonexistent\"",
                "cannot read",
            ),
            (
                "inter_broker_listener_name = \"SASL_PLAINTEXT\"\ninter_broker_sasl_mechanism = \"OAUTHBEARER\"",
                "not supported",
            ),
        ] {
            let c: ServeConfig = toml::from_str(&format!("{q}{extra}")).unwrap();
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(why), "{extra}: {e}");
        }
        let c: ServeConfig = toml::from_str(&format!(
            "{q}inter_broker_listener_name = \"sasl_plaintext\"\ninter_broker_sasl_username = \"kmirror\"\n\
             inter_broker_sasl_password_file = {:?}",
            pw.display().to_string()
        ))
        .unwrap();
        c.validate().unwrap();
        let (name, sec) = c.inter_broker().unwrap();
        assert_eq!(name.as_deref(), Some("SASL_PLAINTEXT"));
        assert_eq!(sec.protocol(), SecurityProtocol::SaslPlaintext);
    }
}
