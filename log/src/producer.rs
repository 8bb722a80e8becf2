//! Producer state: per producer id its epoch and last 5 batches (for idempotent dedup and
//! sequence checks, as Kafka's ProducerStateManager/ProducerAppendInfo), open transactions,
//! and the aborted-transaction index that read_committed fetches need.

use std::collections::{BTreeMap, HashMap, VecDeque};

use kmirror_types::{Offset, ProducerId};

use crate::batch::{
    BatchHeader, CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT, CONTROL_TYPE_MIRROR_PID_RESET,
};
use crate::error::LogError;
use crate::{AbortedTxn, ProducerEntry};

/// Kafka keeps the metadata of this many recent batches per producer.
pub(crate) const MAX_BATCHES_PER_PRODUCER: usize = 5;
const NO_EPOCH: i16 = -1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchMeta {
    pub(crate) first_seq: i32,
    pub(crate) last_seq: i32,
    pub(crate) first_offset: i64,
    pub(crate) last_offset: i64,
    pub(crate) max_timestamp: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Producer {
    pub(crate) epoch: i16,
    pub(crate) coordinator_epoch: i32,
    pub(crate) batches: VecDeque<BatchMeta>,
    pub(crate) txn_first: Option<i64>,
    pub(crate) last_timestamp: i64,
    pub(crate) last_offset: i64,
}

impl Default for Producer {
    fn default() -> Self {
        Producer {
            epoch: NO_EPOCH,
            coordinator_epoch: -1,
            batches: VecDeque::new(),
            txn_first: None,
            last_timestamp: -1,
            last_offset: -1,
        }
    }
}

fn in_sequence(last: i32, next: i32) -> bool {
    next as i64 == last as i64 + 1 || (next == 0 && last == i32::MAX)
}

impl Producer {
    fn last_seq(&self) -> i32 {
        self.batches.back().map_or(-1, |b| b.last_seq)
    }

    /// Client-origin checks for a data batch (Kafka ProducerAppendInfo). Ok(Some(meta)) means
    /// the batch is a retry of a batch still in the 5-batch window.
    pub(crate) fn check_client(
        &self,
        pid: i64,
        h: &BatchHeader<'_>,
    ) -> Result<Option<BatchMeta>, LogError> {
        let epoch = h.producer_epoch();
        if epoch < self.epoch {
            return Err(LogError::InvalidProducerEpoch {
                producer_id: ProducerId(pid),
                epoch,
                current: self.epoch,
            });
        }
        let first_seq = h.base_sequence();
        if epoch == self.epoch {
            if let Some(m) = self
                .batches
                .iter()
                .find(|m| m.first_seq == first_seq && m.last_seq == h.last_sequence())
            {
                return Ok(Some(*m));
            }
        }
        if first_seq >= 0 {
            if epoch != self.epoch {
                if first_seq != 0 && self.epoch != NO_EPOCH {
                    return Err(LogError::OutOfOrderSequence {
                        producer_id: ProducerId(pid),
                        sequence: first_seq,
                        last_sequence: self.last_seq(),
                    });
                }
            } else if !self.batches.is_empty() && !in_sequence(self.last_seq(), first_seq) {
                // An entry without batches (state expired by delete-records or a reset) accepts
                // any sequence, like Kafka's NO_PRODUCER_EPOCH case.
                return Err(LogError::OutOfOrderSequence {
                    producer_id: ProducerId(pid),
                    sequence: first_seq,
                    last_sequence: self.last_seq(),
                });
            }
        }
        if !h.is_transactional() && self.txn_first.is_some() {
            return Err(LogError::InvalidTxnState {
                producer_id: ProducerId(pid),
                reason: "non-transactional write while a transaction is open".into(),
            });
        }
        Ok(None)
    }

    /// Applies a data batch (no checks). Returns true if it opened a transaction.
    pub(crate) fn apply_data(&mut self, h: &BatchHeader<'_>, first: i64, last: i64) -> bool {
        if h.producer_epoch() != self.epoch {
            self.batches.clear();
            self.epoch = h.producer_epoch();
        }
        if h.base_sequence() >= 0 {
            self.batches.push_back(BatchMeta {
                first_seq: h.base_sequence(),
                last_seq: h.last_sequence(),
                first_offset: first,
                last_offset: last,
                max_timestamp: h.max_timestamp(),
            });
            while self.batches.len() > MAX_BATCHES_PER_PRODUCER {
                self.batches.pop_front();
            }
        }
        self.last_timestamp = h.max_timestamp();
        self.last_offset = last;
        if h.is_transactional() && self.txn_first.is_none() {
            self.txn_first = Some(first);
            return true;
        }
        false
    }

    fn entry(&self) -> ProducerEntry {
        ProducerEntry {
            producer_epoch: self.epoch,
            last_sequence: self.last_seq(),
            last_offset: Offset(self.last_offset),
            coordinator_epoch: self.coordinator_epoch,
            current_txn_first_offset: self.txn_first.map(Offset),
            last_timestamp: self.last_timestamp,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AbortedEntry {
    pub(crate) producer_id: i64,
    pub(crate) first_offset: i64,
    pub(crate) last_offset: i64,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct ProducerState {
    pub(crate) producers: HashMap<i64, Producer>,
    /// first offset of each open transaction -> producer id.
    pub(crate) ongoing: BTreeMap<i64, i64>,
    /// Aborted transactions ordered by their marker offset.
    pub(crate) aborted: Vec<AbortedEntry>,
}

impl ProducerState {
    pub(crate) fn get(&self, pid: i64) -> Option<&Producer> {
        self.producers.get(&pid)
    }

    pub(crate) fn entry(&self, pid: i64) -> Option<ProducerEntry> {
        self.producers.get(&pid).map(Producer::entry)
    }

    pub(crate) fn all(&self) -> Vec<(ProducerId, ProducerEntry)> {
        let mut v: Vec<_> = self
            .producers
            .iter()
            .map(|(pid, p)| (ProducerId(*pid), p.entry()))
            .collect();
        v.sort_by_key(|(pid, _)| pid.0);
        v
    }

    pub(crate) fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing.keys().next().copied()
    }

    /// Applies one batch already in the log. `control` is the control record (type, coordinator
    /// epoch) for control batches.
    pub(crate) fn apply(
        &mut self,
        h: &BatchHeader<'_>,
        first: i64,
        last: i64,
        control: Option<(i16, i32)>,
    ) {
        if let Some((ctype, coord_epoch)) = control {
            if ctype == CONTROL_TYPE_MIRROR_PID_RESET {
                self.producers.clear();
                self.ongoing.clear();
                return;
            }
            let pid = h.producer_id();
            if pid < 0 || (ctype != CONTROL_TYPE_COMMIT && ctype != CONTROL_TYPE_ABORT) {
                return;
            }
            let p = self.producers.entry(pid).or_default();
            if let Some(f) = p.txn_first.take() {
                self.ongoing.remove(&f);
                if ctype == CONTROL_TYPE_ABORT {
                    self.aborted.push(AbortedEntry {
                        producer_id: pid,
                        first_offset: f,
                        last_offset: last,
                    });
                }
            }
            if h.producer_epoch() != p.epoch {
                p.batches.clear();
                p.epoch = h.producer_epoch();
            }
            p.coordinator_epoch = coord_epoch;
            p.last_timestamp = h.max_timestamp();
            p.last_offset = last;
            return;
        }
        let pid = h.producer_id();
        if pid < 0 {
            return;
        }
        let p = self.producers.entry(pid).or_default();
        if p.apply_data(h, first, last) {
            self.ongoing.insert(first, pid);
        }
    }

    /// Checks for a commit/abort marker written by this broker.
    pub(crate) fn check_marker(
        &self,
        pid: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<(), LogError> {
        let Some(p) = self.producers.get(&pid) else {
            return Ok(());
        };
        if producer_epoch < p.epoch {
            return Err(LogError::InvalidProducerEpoch {
                producer_id: ProducerId(pid),
                epoch: producer_epoch,
                current: p.epoch,
            });
        }
        if coordinator_epoch < p.coordinator_epoch {
            return Err(LogError::TransactionCoordinatorFenced {
                producer_id: ProducerId(pid),
                coordinator_epoch,
                current: p.coordinator_epoch,
            });
        }
        Ok(())
    }

    /// Forgets what lies below a new log start: aborted entries that ended before it and
    /// producers whose last write is below it and have no open transaction.
    pub(crate) fn on_log_start(&mut self, log_start: i64) {
        self.aborted.retain(|a| a.last_offset >= log_start);
        self.producers
            .retain(|_, p| p.txn_first.is_some() || p.last_offset >= log_start);
    }

    /// (producer id, first offset, marker offset) of every known aborted transaction.
    pub(crate) fn aborted_entries(&self) -> Vec<(i64, i64, i64)> {
        self.aborted
            .iter()
            .map(|a| (a.producer_id, a.first_offset, a.last_offset))
            .collect()
    }

    /// What the cleaner must keep of each producer: its last data batch, or (if none is
    /// remembered) its last marker of the current epoch.
    pub(crate) fn last_records(&self) -> HashMap<i64, crate::cleaner::LastRecord> {
        self.producers
            .iter()
            .map(|(&pid, p)| {
                (
                    pid,
                    crate::cleaner::LastRecord {
                        last_data_offset: p.batches.back().map(|b| b.last_offset),
                        epoch: p.epoch,
                    },
                )
            })
            .collect()
    }

    /// Aborted transactions overlapping [from, upper): last_offset >= from and first < upper.
    pub(crate) fn aborted_in(&self, from: i64, upper: i64) -> Vec<AbortedTxn> {
        self.aborted
            .iter()
            .filter(|a| a.last_offset >= from && a.first_offset < upper)
            .map(|a| AbortedTxn {
                producer_id: ProducerId(a.producer_id),
                first_offset: Offset(a.first_offset),
            })
            .collect()
    }
}
