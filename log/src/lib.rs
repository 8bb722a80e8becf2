//! kmirror-log: one partition's crash-safe, segmented log of Kafka RecordBatch v2 bytes.
//! (work in progress: API surface first, implementation follows.)
#![allow(clippy::todo)]

pub mod batch;
mod config;
mod error;

use std::path::Path;

use bytes::Bytes;
pub use config::{FlushPolicy, LogConfig};
pub use error::LogError;
pub use kmirror_types::{LeaderEpoch, Offset, ProducerId};

/// Kinds of control batch the log writes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlKind {
    Commit,
    Abort,
    /// kmirror's MIRROR_PID_RESET (control type [`batch::CONTROL_TYPE_MIRROR_PID_RESET`]).
    MirrorPidReset,
}

/// Outcome of an append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendInfo {
    pub first_offset: Offset,
    pub last_offset: Offset,
    pub max_timestamp: i64,
    pub log_append_time: i64,
    pub duplicate: bool,
}

/// Outcome of a read.
#[derive(Debug, Clone)]
pub struct ReadResult {
    pub records: Bytes,
    pub first_offset: Offset,
}

/// An aborted transaction overlapping a fetch range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: ProducerId,
    pub first_offset: Offset,
}

/// Snapshot of one producer's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    pub producer_epoch: i16,
    pub last_sequence: i32,
    pub last_offset: Offset,
    pub coordinator_epoch: i32,
    pub current_txn_first_offset: Option<Offset>,
    pub last_timestamp: i64,
}

/// One partition's log.
pub struct Log {
    config: LogConfig,
}

#[allow(unused_variables)]
impl Log {
    pub fn open(dir: &Path, config: LogConfig) -> Result<Log, LogError> {
        todo!()
    }
    pub fn config(&self) -> &LogConfig {
        &self.config
    }
    pub fn set_config(&mut self, config: LogConfig) {
        self.config = config;
    }
    pub fn append_leader(
        &mut self,
        batches: Bytes,
        epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        todo!()
    }
    pub fn append_mirror(&mut self, batches: Bytes) -> Result<AppendInfo, LogError> {
        todo!()
    }
    pub fn append_control(
        &mut self,
        kind: ControlKind,
        producer_id: ProducerId,
        producer_epoch: i16,
        coordinator_epoch: i32,
        epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        todo!()
    }
    pub fn read(
        &self,
        from: Offset,
        max_bytes: usize,
        upper_bound: Offset,
    ) -> Result<ReadResult, LogError> {
        todo!()
    }
    pub fn log_start_offset(&self) -> Offset {
        todo!()
    }
    pub fn log_end_offset(&self) -> Offset {
        todo!()
    }
    pub fn high_watermark(&self) -> Offset {
        todo!()
    }
    pub fn set_high_watermark(&mut self, hw: Offset) {
        todo!()
    }
    pub fn last_stable_offset(&self) -> Offset {
        todo!()
    }
    pub fn aborted_transactions(&self, from: Offset, upper_bound: Offset) -> Vec<AbortedTxn> {
        todo!()
    }
    pub fn truncate_to(&mut self, offset: Offset) -> Result<(), LogError> {
        todo!()
    }
    pub fn truncate_fully_and_start_at(&mut self, offset: Offset) -> Result<(), LogError> {
        todo!()
    }
    pub fn delete_records_before(&mut self, offset: Offset) -> Result<Offset, LogError> {
        todo!()
    }
    pub fn apply_retention(&mut self, now_ms: i64) -> Result<(), LogError> {
        todo!()
    }
    pub fn roll(&mut self) -> Result<(), LogError> {
        todo!()
    }
    pub fn flush(&mut self) -> Result<(), LogError> {
        todo!()
    }
    pub fn close(self) -> Result<(), LogError> {
        todo!()
    }
    pub fn latest_epoch(&self) -> Option<LeaderEpoch> {
        todo!()
    }
    pub fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<(LeaderEpoch, Offset)> {
        todo!()
    }
    pub fn offset_for_timestamp(&self, ts: i64) -> Option<(Offset, i64)> {
        todo!()
    }
    pub fn max_timestamp_offset(&self) -> Option<(Offset, i64)> {
        todo!()
    }
    pub fn producer_state(&self, pid: ProducerId) -> Option<ProducerEntry> {
        todo!()
    }
    pub fn size_bytes(&self) -> u64 {
        todo!()
    }
}
