//! Share sessions (Kafka 4.1's `ShareSessionCache`): what ShareFetch and ShareAcknowledge
//! check before touching a partition.
//!
//! A session belongs to one (group, member) on this broker: at most one each, at most
//! `group.share.max.share.sessions` in all, never evicted for idleness. Epoch 0 opens one
//! (replacing the member's old session without releasing its records, as Kafka does; a
//! ShareFetch only, and without acknowledgements); a positive epoch must equal the session's
//! and moves it on by one (ShareFetch and ShareAcknowledge share the counter; after the
//! largest it wraps to 1); -1 closes it after its acknowledgements, and the caller then
//! releases what the member holds on the session's partitions, as it does when the
//! member's connection drops. A ShareFetch on an open session reads every partition of the
//! session, not only those it names.

use std::collections::{BTreeSet, HashMap};

use super::partition::ShareMemberId;

/// A partition of a share session: topic id and partition index.
pub type SessionPartition = (uuid::Uuid, i32);

/// Which session: the group and the member.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionKey {
    pub group: String,
    pub member: ShareMemberId,
}

/// Why a request's session was refused (Kafka's top-level error codes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// SHARE_SESSION_NOT_FOUND (122).
    #[error("the share session was not found")]
    NotFound,
    /// INVALID_SHARE_SESSION_EPOCH (123).
    #[error("the share session epoch is invalid")]
    InvalidEpoch,
    /// SHARE_SESSION_LIMIT_REACHED (133).
    #[error("the limit of share sessions on this broker is reached")]
    LimitReached,
    /// INVALID_REQUEST (42).
    #[error("{0}")]
    InvalidRequest(String),
}

impl SessionError {
    /// The Kafka error code.
    pub fn code(&self) -> i16 {
        match self {
            SessionError::NotFound => 122,
            SessionError::InvalidEpoch => 123,
            SessionError::LimitReached => 133,
            SessionError::InvalidRequest(_) => 42,
        }
    }
}

/// One open session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareSession {
    pub partitions: BTreeSet<SessionPartition>,
    /// The epoch the next request must carry.
    pub epoch: i32,
    /// The connection that opened or last used it (its drop closes the session).
    pub connection: u64,
}

/// What a ShareFetch may do once its session checks out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPlan {
    /// The partitions to read (every partition of the session; none when closing).
    pub read: Vec<SessionPartition>,
    /// Epoch -1: apply the acknowledgements, read nothing, then [`ShareSessions::close`].
    pub closing: bool,
    /// The member's earlier session this one replaced (its records stay acquired until their
    /// locks expire).
    pub replaced: Option<ShareSession>,
}

/// The broker's share sessions.
#[derive(Debug)]
pub struct ShareSessions {
    sessions: HashMap<SessionKey, ShareSession>,
    max: usize,
}

/// The epoch after `e` (wrapping to 1, as Kafka's `ShareRequestMetadata.nextEpoch`).
fn next_epoch(e: i32) -> i32 {
    if e == i32::MAX {
        1
    } else {
        e + 1
    }
}

impl ShareSessions {
    /// At most `max` sessions (`group.share.max.share.sessions`).
    pub fn new(max: usize) -> ShareSessions {
        ShareSessions {
            sessions: HashMap::new(),
            max,
        }
    }

    /// Checks a ShareFetch's session (`epoch`, naming `add` and forgetting `forget`, with
    /// acknowledgements or not) on `connection`, and moves the session on.
    pub fn fetch(
        &mut self,
        key: &SessionKey,
        epoch: i32,
        add: &[SessionPartition],
        forget: &[SessionPartition],
        has_acks: bool,
        connection: u64,
    ) -> Result<FetchPlan, SessionError> {
        match epoch {
            0 => {
                if has_acks {
                    return Err(SessionError::InvalidRequest(
                        "Acknowledge data present in initial fetch request".into(),
                    ));
                }
                let replaced = self.sessions.remove(key);
                if self.sessions.len() >= self.max {
                    if let Some(old) = replaced {
                        self.sessions.insert(key.clone(), old);
                    }
                    return Err(SessionError::LimitReached);
                }
                let session = ShareSession {
                    partitions: add.iter().copied().collect(),
                    epoch: 1,
                    connection,
                };
                let read = session.partitions.iter().copied().collect();
                self.sessions.insert(key.clone(), session);
                Ok(FetchPlan {
                    read,
                    closing: false,
                    replaced,
                })
            }
            -1 => {
                if !self.sessions.contains_key(key) {
                    return Err(SessionError::NotFound);
                }
                Ok(FetchPlan {
                    read: Vec::new(),
                    closing: true,
                    replaced: None,
                })
            }
            e if e < -1 => Err(SessionError::InvalidEpoch),
            e => {
                let s = self.sessions.get_mut(key).ok_or(SessionError::NotFound)?;
                if s.epoch != e {
                    return Err(SessionError::InvalidEpoch);
                }
                s.partitions.extend(add.iter().copied());
                for p in forget {
                    s.partitions.remove(p);
                }
                s.epoch = next_epoch(s.epoch);
                s.connection = connection;
                Ok(FetchPlan {
                    read: s.partitions.iter().copied().collect(),
                    closing: false,
                    replaced: None,
                })
            }
        }
    }

    /// Checks a ShareAcknowledge's session; `true` when it closes the session (epoch -1:
    /// apply, then [`ShareSessions::close`]).
    pub fn acknowledge(
        &mut self,
        key: &SessionKey,
        epoch: i32,
        connection: u64,
    ) -> Result<bool, SessionError> {
        match epoch {
            0 => Err(SessionError::InvalidEpoch),
            -1 => {
                if self.sessions.contains_key(key) {
                    Ok(true)
                } else {
                    Err(SessionError::NotFound)
                }
            }
            e if e < -1 => Err(SessionError::InvalidEpoch),
            e => {
                let s = self.sessions.get_mut(key).ok_or(SessionError::NotFound)?;
                if s.epoch != e {
                    return Err(SessionError::InvalidEpoch);
                }
                s.epoch = next_epoch(s.epoch);
                s.connection = connection;
                Ok(false)
            }
        }
    }

    /// Removes a session (closed with epoch -1); the caller releases its member's records
    /// on its partitions.
    pub fn close(&mut self, key: &SessionKey) -> Option<ShareSession> {
        self.sessions.remove(key)
    }

    /// Removes the sessions `connection` last used (it dropped); the caller releases their
    /// members' records.
    pub fn disconnected(&mut self, connection: u64) -> Vec<(SessionKey, ShareSession)> {
        let keys: Vec<SessionKey> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.connection == connection)
            .map(|(k, _)| k.clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| self.sessions.remove(&k).map(|s| (k, s)))
            .collect()
    }

    /// Open sessions of `group` on this broker.
    pub fn of_group(&self, group: &str) -> usize {
        self.sessions.keys().filter(|k| k.group == group).count()
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(member: &str) -> SessionKey {
        SessionKey {
            group: "g".into(),
            member: ShareMemberId(member.into()),
        }
    }

    fn tp(p: i32) -> SessionPartition {
        (uuid::Uuid::from_u128(7), p)
    }

    #[test]
    fn a_session_opens_at_zero_and_each_request_must_carry_the_next_epoch() {
        let mut s = ShareSessions::new(10);
        let plan = s.fetch(&key("a"), 0, &[tp(0)], &[], false, 1).unwrap();
        assert_eq!(plan.read, vec![tp(0)]);
        assert_eq!(
            s.fetch(&key("a"), 2, &[], &[], false, 1),
            Err(SessionError::InvalidEpoch)
        );
        // An incremental fetch reads every partition of the session.
        let plan = s.fetch(&key("a"), 1, &[tp(1)], &[], true, 1).unwrap();
        assert_eq!(plan.read, vec![tp(0), tp(1)]);
        // ShareAcknowledge shares the counter.
        assert_eq!(s.acknowledge(&key("a"), 2, 1), Ok(false));
        let plan = s.fetch(&key("a"), 3, &[], &[tp(0)], false, 1).unwrap();
        assert_eq!(plan.read, vec![tp(1)]);
        assert_eq!(
            s.fetch(&key("b"), 1, &[], &[], false, 1),
            Err(SessionError::NotFound)
        );
        assert_eq!(next_epoch(i32::MAX), 1);
    }

    #[test]
    fn opening_rules_acknowledgements_and_the_session_limit() {
        let mut s = ShareSessions::new(1);
        assert!(matches!(
            s.fetch(&key("a"), 0, &[tp(0)], &[], true, 1),
            Err(SessionError::InvalidRequest(_))
        ));
        assert_eq!(
            s.acknowledge(&key("a"), 0, 1),
            Err(SessionError::InvalidEpoch)
        );
        s.fetch(&key("a"), 0, &[tp(0)], &[], false, 1).unwrap();
        assert_eq!(
            s.fetch(&key("b"), 0, &[tp(0)], &[], false, 2),
            Err(SessionError::LimitReached)
        );
        // The member's own new session replaces its old one (records not released).
        let plan = s.fetch(&key("a"), 0, &[tp(1)], &[], false, 3).unwrap();
        assert_eq!(plan.replaced.map(|o| o.partitions), Some([tp(0)].into()));
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn closing_and_a_dropped_connection_end_the_session() {
        let mut s = ShareSessions::new(10);
        s.fetch(&key("a"), 0, &[tp(0)], &[], false, 1).unwrap();
        s.fetch(&key("b"), 0, &[tp(0)], &[], false, 2).unwrap();
        let plan = s.fetch(&key("a"), -1, &[], &[], true, 1).unwrap();
        assert!(plan.closing && plan.read.is_empty());
        assert!(s.close(&key("a")).is_some());
        assert_eq!(s.acknowledge(&key("a"), -1, 1), Err(SessionError::NotFound));
        let gone = s.disconnected(2);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].0, key("b"));
        assert!(s.is_empty());
        assert_eq!(SessionError::LimitReached.code(), 133);
    }
}
