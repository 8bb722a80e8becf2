//! Leader-epoch cache: epoch -> first offset written in that epoch, following Kafka's
//! LeaderEpochFileCache rules (assign, truncate from end/start, OffsetsForLeaderEpoch lookup).

use std::io;
use std::path::Path;

use crate::checkpoint::write_atomic;

pub(crate) const EPOCH_FILE: &str = "leader-epoch-checkpoint";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EpochCache {
    /// (epoch, start offset), strictly increasing in both.
    entries: Vec<(i32, i64)>,
}

impl EpochCache {
    pub(crate) fn entries(&self) -> &[(i32, i64)] {
        &self.entries
    }

    pub(crate) fn latest(&self) -> Option<(i32, i64)> {
        self.entries.last().copied()
    }

    /// Records that `epoch` starts at `start`. Returns true if the cache changed. Entries that
    /// would break monotonicity (epoch >= new or start >= new) are dropped first, as Kafka does.
    pub(crate) fn assign(&mut self, epoch: i32, start: i64) -> bool {
        if epoch < 0 || start < 0 {
            return false;
        }
        let needed = match self.latest() {
            None => true,
            Some((e, s)) => e != epoch || start < s,
        };
        if !needed {
            return false;
        }
        while let Some(&(e, s)) = self.entries.last() {
            if e >= epoch || s >= start {
                self.entries.pop();
            } else {
                break;
            }
        }
        self.entries.push((epoch, start));
        true
    }

    /// Drops entries whose start offset is >= `end`.
    pub(crate) fn truncate_from_end(&mut self, end: i64) -> bool {
        let before = self.entries.len();
        while matches!(self.entries.last(), Some(&(_, s)) if s >= end) {
            self.entries.pop();
        }
        before != self.entries.len()
    }

    /// Drops entries starting at or below `start`, keeping the last of them re-based to `start`.
    pub(crate) fn truncate_from_start(&mut self, start: i64) -> bool {
        let n = self
            .entries
            .iter()
            .take_while(|&&(_, s)| s <= start)
            .count();
        if n == 0 {
            return false;
        }
        let (epoch, old) = self.entries[n - 1];
        self.entries.drain(..n - 1);
        self.entries[0] = (epoch, start);
        n > 1 || old != start
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }

    /// Kafka's `endOffsetFor(requestedEpoch, logEndOffset)`; None = (UNDEFINED, UNDEFINED).
    pub(crate) fn end_offset_for(&self, requested: i32, log_end: i64) -> Option<(i32, i64)> {
        if requested < 0 {
            return None;
        }
        if self.latest().map(|(e, _)| e) == Some(requested) {
            return Some((requested, log_end));
        }
        let higher = self.entries.iter().find(|&&(e, _)| e > requested)?;
        match self.entries.iter().rev().find(|&&(e, _)| e <= requested) {
            None => Some((requested, higher.1)),
            Some(&(floor, _)) => Some((floor, higher.1)),
        }
    }

    pub(crate) fn write(&self, dir: &Path) -> io::Result<()> {
        let mut s = format!("0\n{}\n", self.entries.len());
        for (e, o) in &self.entries {
            s.push_str(&format!("{e} {o}\n"));
        }
        write_atomic(dir, EPOCH_FILE, s.as_bytes())
    }

    /// Reads the checkpoint; Ok(None) if missing or malformed (the caller rebuilds it).
    pub(crate) fn read(dir: &Path) -> io::Result<Option<EpochCache>> {
        let text = match std::fs::read_to_string(dir.join(EPOCH_FILE)) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(Self::parse(&text))
    }

    fn parse(text: &str) -> Option<EpochCache> {
        let mut lines = text.lines();
        if lines.next()?.trim() != "0" {
            return None;
        }
        let n: usize = lines.next()?.trim().parse().ok()?;
        let mut c = EpochCache::default();
        for _ in 0..n {
            let mut it = lines.next()?.split_whitespace();
            let e: i32 = it.next()?.parse().ok()?;
            let o: i64 = it.next()?.parse().ok()?;
            if let Some(&(pe, po)) = c.entries.last() {
                if e <= pe || o < po {
                    return None;
                }
            }
            c.entries.push((e, o));
        }
        if lines.any(|l| !l.trim().is_empty()) {
            return None;
        }
        Some(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(entries: &[(i32, i64)]) -> EpochCache {
        let mut c = EpochCache::default();
        for &(e, o) in entries {
            assert!(c.assign(e, o));
        }
        c
    }

    #[test]
    fn end_offset_for_follows_kafka_offsets_for_leader_epoch() {
        let c = cache(&[(1, 0), (3, 10), (5, 20)]);
        // latest epoch -> log end offset
        assert_eq!(c.end_offset_for(5, 33), Some((5, 33)));
        // known middle epoch -> start of next epoch
        assert_eq!(c.end_offset_for(3, 33), Some((3, 20)));
        // unknown epoch between known ones -> floor epoch, start of the next higher
        assert_eq!(c.end_offset_for(4, 33), Some((3, 20)));
        assert_eq!(c.end_offset_for(2, 33), Some((1, 10)));
        // below the first epoch -> requested epoch, start of first epoch
        assert_eq!(c.end_offset_for(0, 33), Some((0, 0)));
        // above the latest -> undefined
        assert_eq!(c.end_offset_for(6, 33), None);
        assert_eq!(c.end_offset_for(-1, 33), None);
    }

    #[test]
    fn assign_drops_non_monotonic_entries_and_ignores_same_epoch() {
        let mut c = cache(&[(1, 0), (3, 10)]);
        assert!(!c.assign(3, 15));
        assert!(c.assign(2, 12));
        assert_eq!(c.entries(), &[(1, 0), (2, 12)]);
        assert!(c.assign(4, 5));
        assert_eq!(c.entries(), &[(1, 0), (4, 5)]);
    }

    #[test]
    fn truncation_from_both_ends_matches_kafka() {
        let mut c = cache(&[(1, 0), (3, 10), (5, 20)]);
        assert!(c.truncate_from_end(20));
        assert_eq!(c.entries(), &[(1, 0), (3, 10)]);
        assert!(c.truncate_from_start(12));
        assert_eq!(c.entries(), &[(3, 12)]);
        assert!(!c.truncate_from_start(5));
    }

    #[test]
    fn checkpoint_round_trips_and_rejects_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(&[(1, 0), (7, 99)]);
        c.write(dir.path()).unwrap();
        assert_eq!(EpochCache::read(dir.path()).unwrap(), Some(c));
        std::fs::write(dir.path().join(EPOCH_FILE), b"0\n2\n1 0\n").unwrap();
        assert_eq!(EpochCache::read(dir.path()).unwrap(), None);
        std::fs::write(dir.path().join(EPOCH_FILE), [0xffu8, 0, 1]).unwrap();
        assert_eq!(EpochCache::read(dir.path()).unwrap(), None);
    }
}
