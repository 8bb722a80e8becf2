//! The share coordinator of the `__share_group_state` partitions a node leads: the state of
//! their keys ([`ShareCoordinator`]) and the records it appends to those partitions.
//!
//! A call checks and applies at once (a later request of the same batch sees it) and buffers
//! the record; [`ShareStateStore::flush`] appends the buffered records to their keys'
//! partitions as their leader. A failed append fences the store: its owner loads it again
//! from the partitions, so the state never runs ahead of what they hold for longer than one
//! unanswered batch (the requests of that batch get an error, as with the group
//! coordinator).

use std::sync::Arc;

use super::coordinator::{ReadState, ShareCoordinator, StateError, StateSummary};
use super::partition::StateBatch;
use super::state_record::{state_partition, StateKey, StateRecord};
use crate::coordinator_record::Payload;
use crate::offsets_log::{RecordFile, StoreError};
use crate::replicated::{CoordinatorLog, Loaded, PartitionWriter};

/// The share coordinator of the led `__share_group_state` partitions (module doc).
#[derive(Debug, Default)]
pub struct ShareStateStore {
    coord: ShareCoordinator,
    file: Option<RecordFile>,
    loaded: Loaded,
}

impl ShareStateStore {
    /// No partition led: every key is someone else's.
    pub fn unloaded() -> ShareStateStore {
        ShareStateStore::default()
    }

    /// The store of the partitions in `loaded`, which hold `payloads` (in log order).
    pub fn open_partitioned(
        payloads: &[Vec<u8>],
        writer: Arc<dyn PartitionWriter>,
        loaded: Loaded,
    ) -> Result<ShareStateStore, String> {
        let mut coord = ShareCoordinator::new();
        for bytes in payloads {
            let Payload::Record { key, value, .. } =
                Payload::decode(bytes).map_err(|e| e.to_string())?
            else {
                continue;
            };
            match StateRecord::decode(&key, value.as_deref()) {
                Ok(r) => coord.replay(&r),
                // Kafka skips record types it does not know (a newer version's).
                Err(e) => tracing::warn!(error = %e, "skipping a __share_group_state record"),
            }
        }
        let file =
            RecordFile::partitioned(CoordinatorLog::ShareState, loaded.clone(), payloads, writer);
        Ok(ShareStateStore {
            coord,
            file: Some(file),
            loaded,
        })
    }

    /// The partition of `key` among the topic's partitions (0 when none is known).
    pub fn partition_of(&self, key: &StateKey) -> i32 {
        state_partition(&key.group, key.topic, key.partition, self.loaded.partitions)
    }

    /// Whether a write failed: the store must be loaded again.
    pub fn is_fenced(&self) -> bool {
        self.file.as_ref().is_some_and(RecordFile::is_fenced)
    }

    /// Appends the buffered records to their partitions (module doc).
    pub fn flush(&mut self) -> Result<(), StoreError> {
        match &mut self.file {
            Some(f) => f.sync(),
            None => Ok(()),
        }
    }

    fn apply(&mut self, record: StateRecord) -> Result<(), StateError> {
        let Some(file) = &mut self.file else {
            return Err(StateError::InvalidRequest);
        };
        let (key, value) = record.encode();
        // Buffering cannot fail on partitions; a failed flush fences the store.
        let _ = file.append(&Payload::record(key, value).encode());
        self.coord.replay(&record);
        Ok(())
    }

    /// InitializeShareGroupState (83).
    pub fn initialize(
        &mut self,
        key: &StateKey,
        state_epoch: i32,
        start_offset: i64,
        now_ms: i64,
    ) -> Result<(), StateError> {
        let r = self
            .coord
            .initialize(key, state_epoch, start_offset, now_ms)?;
        self.apply(r)
    }

    /// ReadShareGroupState (84) by a leader at `leader_epoch`.
    pub fn read(&mut self, key: &StateKey, leader_epoch: i32) -> Result<ReadState, StateError> {
        let (state, bump) = self.coord.read(key, leader_epoch)?;
        if let Some(r) = bump {
            self.apply(r)?;
        }
        Ok(state)
    }

    /// WriteShareGroupState (85).
    pub fn write(
        &mut self,
        key: &StateKey,
        state_epoch: i32,
        leader_epoch: i32,
        start_offset: i64,
        batches: &[StateBatch],
        now_ms: i64,
    ) -> Result<(), StateError> {
        let r = self.coord.write(
            key,
            state_epoch,
            leader_epoch,
            start_offset,
            batches,
            now_ms,
        )?;
        self.apply(r)
    }

    /// DeleteShareGroupState (86).
    pub fn delete(&mut self, key: &StateKey) -> Result<(), StateError> {
        match self.coord.delete(key)? {
            Some(r) => self.apply(r),
            None => Ok(()),
        }
    }

    /// ReadShareGroupStateSummary (87).
    pub fn summary(&self, key: &StateKey) -> Result<StateSummary, StateError> {
        self.coord.summary(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Keeps what was appended, per partition; fails when told to.
    #[derive(Default)]
    struct Partitions {
        appended: Mutex<Vec<(i32, i32, Vec<u8>)>>,
        fail: std::sync::atomic::AtomicBool,
    }

    impl PartitionWriter for Partitions {
        fn append(
            &self,
            log: CoordinatorLog,
            partition: i32,
            leader_epoch: i32,
            batches: Vec<u8>,
        ) -> std::io::Result<()> {
            assert_eq!(log, CoordinatorLog::ShareState);
            if self.fail.load(std::sync::atomic::Ordering::Relaxed) {
                return Err(std::io::Error::other("not the leader"));
            }
            self.appended
                .lock()
                .unwrap()
                .push((partition, leader_epoch, batches));
            Ok(())
        }
    }

    fn loaded(n: i32) -> Loaded {
        Loaded {
            partitions: n,
            epochs: (0..n).map(|p| (p, 7)).collect(),
        }
    }

    fn key(p: i32) -> StateKey {
        StateKey {
            group: "g".into(),
            topic: uuid::Uuid::from_u128(42),
            partition: p,
        }
    }

    #[test]
    fn state_written_to_the_keys_partition_is_read_back_after_a_reload() {
        let w = Arc::new(Partitions::default());
        let mut s = ShareStateStore::open_partitioned(&[], w.clone(), loaded(5)).unwrap();
        for p in 0..3 {
            s.initialize(&key(p), 1, -1, 10).unwrap();
        }
        let batch = StateBatch {
            first: kmirror_types::Offset(0),
            last: kmirror_types::Offset(9),
            state: crate::share::partition::RecordState::Acknowledged,
            delivery_count: 1,
        };
        s.write(&key(1), 1, 3, 0, std::slice::from_ref(&batch), 20)
            .unwrap();
        s.flush().unwrap();
        let appended = w.appended.lock().unwrap().clone();
        // Each key's records went to its own partition, in the epoch it was loaded in.
        for (p, epoch, _) in &appended {
            assert_eq!(*epoch, 7);
            assert!((0..3).any(|k| s.partition_of(&key(k)) == *p));
        }
        let payloads: Vec<Vec<u8>> = appended
            .iter()
            .flat_map(|(_, _, b)| crate::coordinator_batch::decode(b).unwrap())
            .map(|p| p.encode())
            .collect();
        let mut again = ShareStateStore::open_partitioned(&payloads, w, loaded(5)).unwrap();
        let st = again.read(&key(1), 3).unwrap();
        assert_eq!(st.start_offset, 0);
        assert_eq!(st.batches, vec![batch]);
        assert_eq!(again.read(&key(0), 0).unwrap().start_offset, -1);
        assert_eq!(again.read(&key(4), 0), Err(StateError::InvalidRequest));
    }

    #[test]
    fn a_failed_append_fences_the_store() {
        let w = Arc::new(Partitions::default());
        let mut s = ShareStateStore::open_partitioned(&[], w.clone(), loaded(3)).unwrap();
        s.initialize(&key(0), 1, -1, 10).unwrap();
        w.fail.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(s.flush().is_err());
        assert!(s.is_fenced());
        assert!(s.flush().is_err());
    }

    #[test]
    fn an_unloaded_store_refuses_writes() {
        let mut s = ShareStateStore::unloaded();
        assert_eq!(
            s.initialize(&key(0), 1, -1, 0),
            Err(StateError::InvalidRequest)
        );
    }
}
