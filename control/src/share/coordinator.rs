//! The share coordinator's state for the keys of one `__share_group_state` partition, and its
//! answers to the share-group state RPCs (InitializeShareGroupState 83, ReadShareGroupState 84,
//! WriteShareGroupState 85, DeleteShareGroupState 86, ReadShareGroupStateSummary 87) as Kafka
//! 4.1's `ShareCoordinatorShard` gives them.
//!
//! Each call checks, then returns the record to append; the caller appends it to the
//! partition and, once it is durable, [`ShareCoordinator::replay`]s it, so the state always
//! equals what the partition holds (a new leader rebuilds it by replaying the partition).
//! A write becomes a ShareSnapshot (the stored batches and the new ones combined, the snapshot
//! epoch moved on) when the key has 500 updates since its last snapshot or the write carries
//! a newer state epoch, else a ShareUpdate.

use std::collections::HashMap;

use super::partition::StateBatch;
use super::state_record::{combine, ShareState, ShareUpdate, StateKey, StateRecord};

/// Kafka's `share.coordinator.snapshot.update.records.per.snapshot`.
pub const UPDATES_PER_SNAPSHOT: u32 = 500;

/// Why a state RPC is refused for a key (Kafka's error codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// INVALID_REQUEST (42): a negative partition, or the key was never initialized.
    #[error("the share partition's state is not initialized")]
    InvalidRequest,
    /// FENCED_LEADER_EPOCH (74): an older leader.
    #[error("the leader epoch is older than the stored one")]
    FencedLeaderEpoch,
    /// FENCED_STATE_EPOCH (124): an older state epoch.
    #[error("the state epoch is older than the stored one")]
    FencedStateEpoch,
}

impl StateError {
    pub fn code(self) -> i16 {
        match self {
            StateError::InvalidRequest => 42,
            StateError::FencedLeaderEpoch => 74,
            StateError::FencedStateEpoch => 124,
        }
    }
}

/// What ReadShareGroupState answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadState {
    pub state_epoch: i32,
    pub start_offset: i64,
    pub batches: Vec<StateBatch>,
}

/// What ReadShareGroupStateSummary answers (start offset -1 when the key has no state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateSummary {
    pub state_epoch: i32,
    pub leader_epoch: i32,
    pub start_offset: i64,
}

#[derive(Debug, Clone)]
struct Entry {
    state: ShareState,
    updates_since_snapshot: u32,
}

/// The keys of one `__share_group_state` partition.
#[derive(Debug, Default)]
pub struct ShareCoordinator {
    keys: HashMap<StateKey, Entry>,
}

impl ShareCoordinator {
    pub fn new() -> ShareCoordinator {
        ShareCoordinator::default()
    }

    /// Applies a record the partition holds (in log order).
    pub fn replay(&mut self, record: &StateRecord) {
        match record {
            StateRecord::Snapshot(k, s) => {
                self.keys.insert(
                    k.clone(),
                    Entry {
                        state: s.clone(),
                        updates_since_snapshot: 0,
                    },
                );
            }
            StateRecord::Update(k, u) => {
                if let Some(e) = self.keys.get_mut(k) {
                    e.state.apply(u);
                    e.updates_since_snapshot += 1;
                }
            }
            StateRecord::Tombstone(k) => {
                self.keys.remove(k);
            }
        }
    }

    fn check_partition(key: &StateKey) -> Result<(), StateError> {
        if key.partition < 0 {
            return Err(StateError::InvalidRequest);
        }
        Ok(())
    }

    /// InitializeShareGroupState: a fresh snapshot at `state_epoch` and `start_offset` (-1:
    /// resolved by the leader's auto-offset-reset), refused for an older state epoch (-1
    /// skips the check).
    pub fn initialize(
        &self,
        key: &StateKey,
        state_epoch: i32,
        start_offset: i64,
        now_ms: i64,
    ) -> Result<StateRecord, StateError> {
        Self::check_partition(key)?;
        let old = self.keys.get(key);
        if let Some(e) = old {
            if state_epoch != -1 && e.state.state_epoch > state_epoch {
                return Err(StateError::FencedStateEpoch);
            }
        }
        Ok(StateRecord::Snapshot(
            key.clone(),
            ShareState {
                snapshot_epoch: old.map_or(0, |e| e.state.snapshot_epoch + 1),
                state_epoch,
                leader_epoch: 0,
                start_offset,
                create_ms: now_ms,
                write_ms: now_ms,
                batches: Vec::new(),
            },
        ))
    }

    /// ReadShareGroupState by a leader at `leader_epoch`: the state, and the record that
    /// stores a newer leader epoch (fencing older leaders' writes from then on).
    pub fn read(
        &self,
        key: &StateKey,
        leader_epoch: i32,
    ) -> Result<(ReadState, Option<StateRecord>), StateError> {
        Self::check_partition(key)?;
        let e = self.keys.get(key).ok_or(StateError::InvalidRequest)?;
        if leader_epoch != -1 && e.state.leader_epoch > leader_epoch {
            return Err(StateError::FencedLeaderEpoch);
        }
        let bump = (leader_epoch > e.state.leader_epoch).then(|| {
            StateRecord::Update(
                key.clone(),
                ShareUpdate {
                    snapshot_epoch: e.state.snapshot_epoch,
                    leader_epoch,
                    start_offset: -1,
                    batches: Vec::new(),
                },
            )
        });
        Ok((
            ReadState {
                state_epoch: e.state.state_epoch,
                start_offset: e.state.start_offset,
                batches: e.state.batches.clone(),
            },
            bump,
        ))
    }

    /// WriteShareGroupState: the record that stores the leader's new start offset and state
    /// batches (epochs of -1 keep the stored ones and skip their checks).
    pub fn write(
        &self,
        key: &StateKey,
        state_epoch: i32,
        leader_epoch: i32,
        start_offset: i64,
        batches: &[StateBatch],
        now_ms: i64,
    ) -> Result<StateRecord, StateError> {
        Self::check_partition(key)?;
        let e = self.keys.get(key).ok_or(StateError::InvalidRequest)?;
        if leader_epoch != -1 && e.state.leader_epoch > leader_epoch {
            return Err(StateError::FencedLeaderEpoch);
        }
        if state_epoch != -1 && e.state.state_epoch > state_epoch {
            return Err(StateError::FencedStateEpoch);
        }
        let newer_state = state_epoch != -1 && state_epoch > e.state.state_epoch;
        if e.updates_since_snapshot >= UPDATES_PER_SNAPSHOT || newer_state {
            let start = if start_offset == -1 {
                e.state.start_offset
            } else {
                start_offset
            };
            return Ok(StateRecord::Snapshot(
                key.clone(),
                ShareState {
                    snapshot_epoch: e.state.snapshot_epoch + 1,
                    state_epoch: if state_epoch == -1 {
                        e.state.state_epoch
                    } else {
                        state_epoch
                    },
                    leader_epoch: if leader_epoch == -1 {
                        e.state.leader_epoch
                    } else {
                        leader_epoch
                    },
                    start_offset: start,
                    create_ms: e.state.create_ms,
                    write_ms: now_ms,
                    batches: combine(&e.state.batches, batches, start),
                },
            ));
        }
        Ok(StateRecord::Update(
            key.clone(),
            ShareUpdate {
                snapshot_epoch: e.state.snapshot_epoch,
                leader_epoch,
                start_offset,
                batches: batches.to_vec(),
            },
        ))
    }

    /// DeleteShareGroupState: the tombstone, or nothing for a key without state.
    pub fn delete(&self, key: &StateKey) -> Result<Option<StateRecord>, StateError> {
        Self::check_partition(key)?;
        Ok(self
            .keys
            .contains_key(key)
            .then(|| StateRecord::Tombstone(key.clone())))
    }

    /// ReadShareGroupStateSummary.
    pub fn summary(&self, key: &StateKey) -> Result<StateSummary, StateError> {
        Self::check_partition(key)?;
        Ok(match self.keys.get(key) {
            Some(e) => StateSummary {
                state_epoch: e.state.state_epoch,
                leader_epoch: e.state.leader_epoch,
                start_offset: e.state.start_offset,
            },
            None => StateSummary {
                state_epoch: 0,
                leader_epoch: 0,
                start_offset: -1,
            },
        })
    }

    /// Keys with state.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::share::partition::RecordState;
    use crate::share::test_support::sb;

    fn key() -> StateKey {
        StateKey {
            group: "g".into(),
            topic: uuid::Uuid::from_u128(9),
            partition: 0,
        }
    }

    /// Applies a call's record as the caller would once it is durable.
    fn commit(c: &mut ShareCoordinator, r: StateRecord) -> StateRecord {
        // Through the wire format, as a reloading leader reads it.
        let (k, v) = r.encode();
        let back = StateRecord::decode(&k, v.as_deref()).unwrap();
        c.replay(&back);
        back
    }

    #[test]
    fn a_key_is_initialized_written_read_and_fenced_by_epochs() {
        let mut c = ShareCoordinator::new();
        assert_eq!(c.read(&key(), 1), Err(StateError::InvalidRequest));
        assert_eq!(c.summary(&key()).unwrap().start_offset, -1);
        let r = c.initialize(&key(), 3, -1, 100).unwrap();
        commit(&mut c, r);
        // The first leader reads: its epoch is stored.
        let (state, bump) = c.read(&key(), 5).unwrap();
        assert_eq!((state.state_epoch, state.start_offset), (3, -1));
        commit(&mut c, bump.expect("newer leader epoch stored"));
        assert_eq!(c.read(&key(), 4), Err(StateError::FencedLeaderEpoch));
        let w = c
            .write(
                &key(),
                3,
                5,
                10,
                &[sb(10, 12, RecordState::Acknowledged, 1)],
                200,
            )
            .unwrap();
        assert!(matches!(w, StateRecord::Update(..)));
        commit(&mut c, w);
        let w = c
            .write(
                &key(),
                3,
                5,
                13,
                &[sb(13, 13, RecordState::Archived, 5)],
                300,
            )
            .unwrap();
        commit(&mut c, w);
        let (state, bump) = c.read(&key(), 5).unwrap();
        assert!(bump.is_none());
        assert_eq!(state.start_offset, 13);
        assert_eq!(state.batches, vec![sb(13, 13, RecordState::Archived, 5)]);
        assert_eq!(
            c.write(&key(), 3, 4, 14, &[], 400),
            Err(StateError::FencedLeaderEpoch)
        );
        assert_eq!(
            c.write(&key(), 2, 5, 14, &[], 400),
            Err(StateError::FencedStateEpoch)
        );
        assert_eq!(
            c.initialize(&key(), 2, 0, 500),
            Err(StateError::FencedStateEpoch)
        );
        // A newer state epoch (an offsets reset) is written as a snapshot.
        let w = c.write(&key(), 4, 5, 20, &[], 600).unwrap();
        assert!(
            matches!(w, StateRecord::Snapshot(_, ref s) if s.snapshot_epoch == 1 && s.start_offset == 20)
        );
    }

    #[test]
    fn every_500_updates_a_snapshot_holds_the_combined_state() {
        let mut c = ShareCoordinator::new();
        let r = c.initialize(&key(), 0, 0, 0).unwrap();
        commit(&mut c, r);
        for i in 0..UPDATES_PER_SNAPSHOT as i64 {
            let w = c
                .write(&key(), 0, 1, -1, &[sb(i, i, RecordState::Available, 1)], i)
                .unwrap();
            assert!(matches!(w, StateRecord::Update(..)), "write {i}");
            commit(&mut c, w);
        }
        let w = c
            .write(
                &key(),
                0,
                1,
                -1,
                &[sb(500, 500, RecordState::Archived, 2)],
                9,
            )
            .unwrap();
        let StateRecord::Snapshot(_, s) = commit(&mut c, w) else {
            panic!("the 501st write is a snapshot");
        };
        assert_eq!(s.snapshot_epoch, 1);
        assert_eq!(
            s.batches,
            vec![
                sb(0, 499, RecordState::Available, 1),
                sb(500, 500, RecordState::Archived, 2)
            ]
        );
        // Deleting writes a tombstone once; a key without state needs none.
        let t = c.delete(&key()).unwrap().unwrap();
        commit(&mut c, t);
        assert!(c.is_empty());
        assert_eq!(c.delete(&key()), Ok(None));
        let bad = StateKey {
            partition: -1,
            ..key()
        };
        assert_eq!(c.summary(&bad), Err(StateError::InvalidRequest));
    }
}
