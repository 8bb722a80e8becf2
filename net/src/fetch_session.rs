//! Fetch sessions served to clients (KIP-227): a client that opens a session sends, after the
//! first full Fetch, only the partitions whose fetch position changed (and those it forgets),
//! and gets back only the partitions with something new — records, an error, or a moved high
//! watermark / last stable offset / log start offset.
//!
//! Owns: one core's session cache (plain single-threaded state, held by that core's `Ctx`),
//! the session-epoch rules and the "what changed" test. It does no I/O and must not be
//! borrowed across an await.
//!
//! Invariants: a session lives on the core whose connection created it; its id carries that
//! core in its low byte, so an id sent to another core's connection is answered
//! FETCH_SESSION_ID_NOT_FOUND (the client then starts a new session) and never matches
//! another core's session. Epochs: a new session expects epoch 1 next; each incremental
//! request must carry the expected epoch, which then advances (wrapping past i32::MAX to 1).
//! The cache holds at most [`MAX_SESSIONS`] sessions per core; the least recently used one
//! is evicted to make room (its client gets FETCH_SESSION_ID_NOT_FOUND and starts over).

use std::collections::HashMap;
use std::time::Instant;

use indexmap::IndexMap;
use uuid::Uuid;

/// Sessions per core (Kafka's max.incremental.fetch.session.cache.slots is 1000 per broker).
pub(crate) const MAX_SESSIONS: usize = 1000;

/// The client's view of one partition in a session, and what it was last told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cached {
    pub topic_id: Uuid,
    pub fetch_offset: i64,
    pub current_leader_epoch: i32,
    pub max_bytes: i32,
    /// (high watermark, last stable offset, log start) last sent; None before the first send.
    pub sent: Option<(i64, i64, i64)>,
}

/// One session: its partitions in the order they were added.
#[derive(Debug)]
pub struct Session {
    pub next_epoch: i32,
    pub partitions: IndexMap<(String, i32), Cached>,
    last_used: Instant,
}

/// What a Fetch request's (session id, epoch) asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Mode {
    /// No session: a full fetch, answered with session id 0.
    Sessionless,
    /// A full fetch that opens a new session (epoch 0).
    Open,
    /// An incremental fetch in an existing session.
    Incremental(i32),
}

/// A session request the cache refuses: the Kafka error code.
pub(crate) type Refused = i16;

const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
const INVALID_FETCH_SESSION_EPOCH: i16 = 71;

/// One core's sessions.
#[derive(Debug)]
pub struct Sessions {
    core: u8,
    by_id: HashMap<i32, Session>,
    next: u32,
}

impl Sessions {
    pub fn new(core: usize) -> Sessions {
        Sessions {
            core: core as u8,
            by_id: HashMap::new(),
            // Start somewhere different per process so ids of a restarted broker do not
            // meet old clients' sessions.
            next: (Uuid::new_v4().as_u128() as u32) >> 9,
        }
    }

    /// Applies the request's (session id, epoch) per KIP-227: closes sessions the client is
    /// done with, checks the epoch of an incremental request. `Err` is the top-level error.
    pub fn begin(&mut self, session_id: i32, epoch: i32) -> Result<Mode, Refused> {
        match epoch {
            -1 => {
                if session_id != 0 {
                    self.by_id.remove(&session_id);
                }
                Ok(Mode::Sessionless)
            }
            0 => {
                if session_id != 0 {
                    self.by_id.remove(&session_id);
                }
                Ok(Mode::Open)
            }
            e if e > 0 => {
                let Some(s) = self.by_id.get_mut(&session_id) else {
                    return Err(FETCH_SESSION_ID_NOT_FOUND);
                };
                if s.next_epoch != e {
                    return Err(INVALID_FETCH_SESSION_EPOCH);
                }
                s.last_used = Instant::now();
                Ok(Mode::Incremental(session_id))
            }
            _ => Err(INVALID_FETCH_SESSION_EPOCH),
        }
    }

    /// Creates a session holding `partitions` and returns its id (0 when the client gets none:
    /// nothing to hold).
    pub fn open(&mut self, partitions: IndexMap<(String, i32), Cached>) -> i32 {
        if partitions.is_empty() {
            return 0;
        }
        if self.by_id.len() >= MAX_SESSIONS {
            if let Some(oldest) = self
                .by_id
                .iter()
                .min_by_key(|(_, s)| s.last_used)
                .map(|(id, _)| *id)
            {
                self.by_id.remove(&oldest);
            }
        }
        let id = loop {
            self.next = self.next.wrapping_add(1) & 0x7F_FFFF;
            let id = ((self.next << 8) | u32::from(self.core)) as i32;
            if id != 0 && !self.by_id.contains_key(&id) {
                break id;
            }
        };
        self.by_id.insert(
            id,
            Session {
                next_epoch: 1,
                partitions,
                last_used: Instant::now(),
            },
        );
        id
    }

    pub fn get_mut(&mut self, id: i32) -> Option<&mut Session> {
        self.by_id.get_mut(&id)
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

impl Session {
    /// The epoch the next request must carry, after this one was served.
    pub fn advance(&mut self) {
        self.next_epoch = if self.next_epoch == i32::MAX {
            1
        } else {
            self.next_epoch + 1
        };
    }
}

/// Whether an incremental response must carry the partition: new records, an error, or
/// offsets the client was not told yet. Updates what the client was told.
pub(crate) fn changed(
    c: &mut Cached,
    error: i16,
    has_records: bool,
    offsets: (i64, i64, i64),
) -> bool {
    let moved = c.sent != Some(offsets);
    if error == 0 {
        c.sent = Some(offsets);
    }
    error != 0 || has_records || moved
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(n: i32) -> IndexMap<(String, i32), Cached> {
        (0..n)
            .map(|p| {
                (
                    ("t".to_string(), p),
                    Cached {
                        topic_id: Uuid::nil(),
                        fetch_offset: 0,
                        current_leader_epoch: -1,
                        max_bytes: 1 << 20,
                        sent: None,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn epochs_follow_kip_227() {
        let mut s = Sessions::new(3);
        assert_eq!(s.begin(0, 0), Ok(Mode::Open));
        let id = s.open(parts(2));
        assert_eq!(id & 0xFF, 3, "the id names its core");
        assert_eq!(s.begin(id, 1), Ok(Mode::Incremental(id)));
        s.get_mut(id).unwrap().advance();
        // A replayed or skipped epoch is refused; the right one is served.
        assert_eq!(s.begin(id, 1), Err(INVALID_FETCH_SESSION_EPOCH));
        assert_eq!(s.begin(id, 3), Err(INVALID_FETCH_SESSION_EPOCH));
        assert_eq!(s.begin(id, 2), Ok(Mode::Incremental(id)));
        // Unknown ids, and ids closed by the client (epoch -1) or replaced (epoch 0).
        assert_eq!(s.begin(id + 256, 1), Err(FETCH_SESSION_ID_NOT_FOUND));
        assert_eq!(s.begin(id, -1), Ok(Mode::Sessionless));
        assert_eq!(s.begin(id, 2), Err(FETCH_SESSION_ID_NOT_FOUND));
        let id2 = s.open(parts(1));
        assert_eq!(s.begin(id2, 0), Ok(Mode::Open));
        assert!(s.is_empty(), "epoch 0 on an existing session closes it");
        assert_eq!(s.open(IndexMap::new()), 0, "nothing to hold, no session");
    }

    #[test]
    fn a_full_cache_evicts_the_least_recently_used_session() {
        let mut s = Sessions::new(0);
        let first = s.open(parts(1));
        let second = s.open(parts(1));
        for _ in 2..MAX_SESSIONS {
            s.open(parts(1));
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert_eq!(s.begin(first, 1), Ok(Mode::Incremental(first)));
        let newest = s.open(parts(1));
        assert_eq!(s.len(), MAX_SESSIONS);
        assert_eq!(s.begin(second, 1), Err(FETCH_SESSION_ID_NOT_FOUND));
        assert_eq!(s.begin(first, 1), Ok(Mode::Incremental(first)));
        assert_eq!(s.begin(newest, 1), Ok(Mode::Incremental(newest)));
    }

    #[test]
    fn only_news_goes_into_an_incremental_response() {
        let mut c = parts(1).swap_remove(&("t".to_string(), 0)).unwrap();
        assert!(changed(&mut c, 0, false, (5, 5, 0)), "first answer");
        assert!(!changed(&mut c, 0, false, (5, 5, 0)), "nothing new");
        assert!(changed(&mut c, 0, true, (5, 5, 0)), "records");
        assert!(changed(&mut c, 0, false, (6, 5, 0)), "high watermark moved");
        assert!(changed(&mut c, 6, false, (6, 5, 0)), "an error");
        assert!(!changed(&mut c, 0, false, (6, 5, 0)));
    }
}
