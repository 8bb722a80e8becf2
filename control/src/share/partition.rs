//! One share group's in-flight window on one topic partition (Kafka's `SharePartition`).
//!
//! Offsets from the share-partition start offset (SPSO) up to the end of the window are each
//! tracked: AVAILABLE (to be delivered), ACQUIRED by one member until its lock expires,
//! ACKNOWLEDGED or ARCHIVED (both final). Offsets past the window are new: the next read of
//! the log acquires them with delivery count 1. As in Kafka 4.1:
//!
//! - a member acquires whole log batches (never part of one for new records), up to the
//!   request's soft `max_records`, and only while the window holds fewer than the in-flight
//!   limit (`group.share.partition.max.record.locks`); records already in the window are
//!   re-acquired per offset, each acquisition counting one more delivery;
//! - an acknowledgement names ranges with one type for the range or one per offset (GAP and
//!   REJECT archive, ACCEPT acknowledges, RELEASE makes available again); every named offset
//!   must be acquired by that member, else nothing is applied;
//! - a released or expired record whose delivery count reached the delivery limit is archived;
//!   a record released because its member's session closed gets that delivery back;
//! - offsets a read proves absent from the log (compacted away, or never written) are
//!   archived, so the SPSO can pass them;
//! - the SPSO moves past the longest prefix of final records.
//!
//! What is persisted ([`SharePartition::state_batches`]) is the window with acquired records
//! shown as they were before their acquisition (Kafka persists transitions out of ACQUIRED
//! only), so a reload re-delivers them with the same count.

use std::collections::BTreeMap;

use kmirror_types::Offset;

/// A record's state (the values Kafka persists as `DeliveryState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordState {
    Available,
    Acquired,
    Acknowledged,
    Archived,
}

impl RecordState {
    /// The wire and record value.
    pub fn code(self) -> i8 {
        match self {
            RecordState::Available => 0,
            RecordState::Acquired => 1,
            RecordState::Acknowledged => 2,
            RecordState::Archived => 4,
        }
    }

    pub fn from_code(code: i8) -> Option<RecordState> {
        Some(match code {
            0 => RecordState::Available,
            1 => RecordState::Acquired,
            2 => RecordState::Acknowledged,
            4 => RecordState::Archived,
            _ => return None,
        })
    }

    fn is_final(self) -> bool {
        matches!(self, RecordState::Acknowledged | RecordState::Archived)
    }
}

/// How a member acknowledges a record (`AcknowledgeTypes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckType {
    /// Not a record the member was given (a control record, a gap): archived.
    Gap,
    Accept,
    Release,
    Reject,
}

impl AckType {
    pub fn from_code(code: i8) -> Option<AckType> {
        Some(match code {
            0 => AckType::Gap,
            1 => AckType::Accept,
            2 => AckType::Release,
            3 => AckType::Reject,
            _ => return None,
        })
    }
}

/// A share-group member (the client's own id, a Kafka Uuid in its string form).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShareMemberId(pub String);

/// Records handed to a member, all with the same delivery count (`AcquiredRecords`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquiredRecords {
    pub first: Offset,
    pub last: Offset,
    pub delivery_count: i16,
}

/// One record batch as read from the log: its first and last offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogBatch {
    pub first: Offset,
    pub last: Offset,
}

/// What one acquisition may take.
#[derive(Debug, Clone, Copy)]
pub struct AcquireLimits {
    /// ShareFetch `MaxRecords`: a soft limit, met at a batch boundary.
    pub max_records: usize,
    /// ShareFetch `BatchSize`: an [`AcquiredRecords`] entry is closed at the first batch
    /// boundary once it holds this many.
    pub batch_size: usize,
    /// The acquisition lock (`share.record.lock.duration.ms`).
    pub lock_ms: i64,
}

/// One acknowledgement range (`AcknowledgementBatches`); `types` holds one type for the whole
/// range or one per offset (wire values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckBatch {
    pub first: Offset,
    pub last: Offset,
    pub types: Vec<i8>,
}

/// Why an acknowledgement was refused (nothing of it was applied).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AckError {
    /// INVALID_REQUEST: malformed ranges or types, or offsets past the window.
    #[error("{0}")]
    InvalidRequest(String),
    /// INVALID_RECORD_STATE: a named record is not acquired by this member.
    #[error("{0}")]
    InvalidRecordState(String),
}

/// A run of the persisted state (`StateBatches` of ShareSnapshot / ShareUpdate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateBatch {
    pub first: Offset,
    pub last: Offset,
    pub state: RecordState,
    pub delivery_count: i16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    state: RecordState,
    delivery_count: i16,
    /// The member holding it and when its lock expires (ACQUIRED only).
    lock: Option<(ShareMemberId, i64)>,
}

impl Record {
    fn available(delivery_count: i16) -> Record {
        Record {
            state: RecordState::Available,
            delivery_count,
            lock: None,
        }
    }

    fn archived() -> Record {
        Record {
            state: RecordState::Archived,
            delivery_count: 0,
            lock: None,
        }
    }
}

/// The in-flight window of one share group on one topic partition.
#[derive(Debug, Clone)]
pub struct SharePartition {
    /// The SPSO: every offset below it is done with.
    start: i64,
    /// The first offset past the window: offsets from here on have not been read yet.
    end: i64,
    /// Exactly the offsets `start..end`.
    records: BTreeMap<i64, Record>,
    /// `group.share.delivery.count.limit`.
    delivery_limit: i16,
    /// `group.share.partition.max.record.locks`.
    max_in_flight: usize,
    /// Runs of final records the SPSO passed since the last [`SharePartition::take_write`]:
    /// they leave the window, but the next write must still persist their final state.
    passed: Vec<StateBatch>,
}

/// A WriteShareGroupState's content: the SPSO to record and the runs to merge into the
/// stored state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateWrite {
    pub start: Offset,
    pub batches: Vec<StateBatch>,
}

impl SharePartition {
    /// An empty window starting at `start` (the SPSO the auto-offset-reset resolved).
    pub fn new(start: Offset, delivery_limit: i16, max_in_flight: usize) -> SharePartition {
        SharePartition {
            start: start.0,
            end: start.0,
            records: BTreeMap::new(),
            delivery_limit: delivery_limit.max(1),
            max_in_flight: max_in_flight.max(1),
            passed: Vec::new(),
        }
    }

    /// The window as persisted: the SPSO and runs of states. Runs below the SPSO are ignored;
    /// offsets between runs were never read and are read again; an ACQUIRED run (not
    /// persisted by Kafka, tolerated here) counts as AVAILABLE.
    pub fn load(
        start: Offset,
        batches: &[StateBatch],
        delivery_limit: i16,
        max_in_flight: usize,
    ) -> SharePartition {
        let mut p = SharePartition::new(start, delivery_limit, max_in_flight);
        let mut sorted: Vec<&StateBatch> = batches.iter().filter(|b| b.last.0 >= p.start).collect();
        sorted.sort_by_key(|b| b.first);
        // Offsets up to the last persisted one are tracked; unread gaps before it are
        // available with no delivery yet (they are read, and acquired, like new ones).
        if let Some(last) = sorted.iter().map(|b| b.last.0).max() {
            for o in p.start..=last {
                p.records.insert(o, Record::available(0));
            }
            p.end = last + 1;
        }
        for b in sorted {
            for o in b.first.0.max(p.start)..=b.last.0 {
                let r = match b.state {
                    RecordState::Available | RecordState::Acquired => {
                        Record::available(b.delivery_count)
                    }
                    s => Record {
                        state: s,
                        delivery_count: b.delivery_count,
                        lock: None,
                    },
                };
                p.records.insert(o, r);
            }
        }
        p.advance();
        p
    }

    /// The share-partition start offset (SPSO).
    pub fn start_offset(&self) -> Offset {
        Offset(self.start)
    }

    /// The first offset not yet read from the log.
    pub fn end_offset(&self) -> Offset {
        Offset(self.end)
    }

    /// Offsets tracked (acquired, available, or final but not yet passed by the SPSO).
    pub fn in_flight(&self) -> usize {
        self.records.len()
    }

    /// Where the next read of the log starts: the first available record in the window,
    /// else the end of the window.
    pub fn next_fetch_offset(&self) -> Offset {
        Offset(
            self.records
                .iter()
                .find(|(_, r)| r.state == RecordState::Available)
                .map(|(o, _)| *o)
                .unwrap_or(self.end),
        )
    }

    /// Whether a read could acquire anything: an available record in the window, or room
    /// for new ones.
    pub fn can_acquire(&self) -> bool {
        self.next_fetch_offset().0 < self.end || self.has_room()
    }

    fn has_room(&self) -> bool {
        usize::try_from(self.end - self.start).unwrap_or(usize::MAX) < self.max_in_flight
    }

    /// Acquires for `member` what `read` (the log's batches from `read_from` on, in order)
    /// holds that is available or new, within `limits`. Offsets the read passed over are
    /// absent from the log and archived.
    pub fn acquire(
        &mut self,
        member: &ShareMemberId,
        read_from: Offset,
        read: &[LogBatch],
        limits: AcquireLimits,
        now_ms: i64,
    ) -> Vec<AcquiredRecords> {
        // As Kafka, the in-flight limit gates the read, not what one read brings.
        if !self.can_acquire() {
            return Vec::new();
        }
        let deadline = now_ms.saturating_add(limits.lock_ms);
        let mut out: Vec<AcquiredRecords> = Vec::new();
        let mut taken = 0usize;
        let mut cursor = read_from.0.max(self.start);
        for b in read {
            let (first, last) = (b.first.0, b.last.0);
            if last < cursor || first > last {
                continue;
            }
            if taken >= limits.max_records.max(1) {
                break;
            }
            // What the log does not hold between the cursor and this batch is gone.
            self.archive_absent(cursor, first);
            let mut entry_start = true;
            for o in first.max(self.start)..=last {
                let count = if o >= self.end {
                    self.records.insert(
                        o,
                        Record {
                            state: RecordState::Acquired,
                            delivery_count: 1,
                            lock: Some((member.clone(), deadline)),
                        },
                    );
                    self.end = o + 1;
                    1
                } else {
                    match self.records.get_mut(&o) {
                        Some(r) if r.state == RecordState::Available => {
                            r.state = RecordState::Acquired;
                            r.delivery_count = r.delivery_count.saturating_add(1);
                            r.lock = Some((member.clone(), deadline));
                            r.delivery_count
                        }
                        _ => {
                            entry_start = true;
                            continue;
                        }
                    }
                };
                taken += 1;
                let at_boundary = o == first.max(self.start) || entry_start;
                match out.last_mut() {
                    Some(cur)
                        if cur.last.0 + 1 == o
                            && cur.delivery_count == count
                            && !(at_boundary
                                && (cur.last.0 - cur.first.0 + 1) as usize
                                    >= limits.batch_size.max(1)) =>
                    {
                        cur.last = Offset(o);
                    }
                    _ => out.push(AcquiredRecords {
                        first: Offset(o),
                        last: Offset(o),
                        delivery_count: count,
                    }),
                }
                entry_start = false;
            }
            cursor = last + 1;
        }
        out
    }

    /// Archives the available records in `from..to` (a read showed the log has nothing
    /// there) and records offsets past the window in that range as archived.
    fn archive_absent(&mut self, from: i64, to: i64) {
        for o in from.max(self.start)..to {
            if o >= self.end {
                self.records.insert(o, Record::archived());
                self.end = o + 1;
            } else if let Some(r) = self.records.get_mut(&o) {
                if r.state == RecordState::Available {
                    *r = Record::archived();
                }
            }
        }
        self.advance();
    }

    /// Applies `member`'s acknowledgements, all or nothing.
    pub fn acknowledge(
        &mut self,
        member: &ShareMemberId,
        batches: &[AckBatch],
    ) -> Result<(), AckError> {
        let bad = |m: &str| Err(AckError::InvalidRequest(m.to_string()));
        let mut prev_last: Option<i64> = None;
        let mut plan: Vec<(i64, AckType)> = Vec::new();
        for b in batches {
            let (first, last) = (b.first.0, b.last.0);
            if first > last {
                return bad("First offset should not be greater than last offset");
            }
            if prev_last.is_some_and(|p| first < p) {
                return bad("Acknowledgement batches must be in ascending order");
            }
            prev_last = Some(last);
            if b.types.is_empty() {
                return bad("Acknowledge types must not be empty");
            }
            if b.types.len() > 1 && b.types.len() as i64 != last - first + 1 {
                return bad("Acknowledge types must be one, or one per offset");
            }
            let mut types = Vec::with_capacity(b.types.len());
            for t in &b.types {
                match AckType::from_code(*t) {
                    Some(t) => types.push(t),
                    None => return bad("Invalid acknowledge type"),
                }
            }
            if last >= self.end {
                return bad("Offset is past the acquired records");
            }
            // Offsets below the SPSO are done with: skipped, as Kafka does.
            for o in first.max(self.start)..=last {
                let t = if types.len() == 1 {
                    types[0]
                } else {
                    types[(o - first) as usize]
                };
                match self.records.get(&o) {
                    Some(Record {
                        state: RecordState::Acquired,
                        lock: Some((owner, _)),
                        ..
                    }) if owner == member => plan.push((o, t)),
                    Some(Record {
                        state: RecordState::Acquired,
                        ..
                    }) => {
                        return Err(AckError::InvalidRecordState(
                            "Member is not the owner of batch record".into(),
                        ))
                    }
                    _ => {
                        return Err(AckError::InvalidRecordState(
                            "The batch is not in the acquired state".into(),
                        ))
                    }
                }
            }
        }
        for (o, t) in plan {
            let limit = self.delivery_limit;
            if let Some(r) = self.records.get_mut(&o) {
                r.lock = None;
                r.state = match t {
                    AckType::Accept => RecordState::Acknowledged,
                    AckType::Gap | AckType::Reject => RecordState::Archived,
                    AckType::Release if r.delivery_count >= limit => RecordState::Archived,
                    AckType::Release => RecordState::Available,
                };
            }
        }
        self.advance();
        Ok(())
    }

    /// Archives the records of `first..=last` that `member` just acquired (read_committed:
    /// a batch of an aborted transaction is never delivered), and returns `acquired` without
    /// them.
    pub fn archive_acquired(
        &mut self,
        member: &ShareMemberId,
        first: Offset,
        last: Offset,
        acquired: Vec<AcquiredRecords>,
    ) -> Vec<AcquiredRecords> {
        for o in first.0.max(self.start)..=last.0 {
            if let Some(r) = self.records.get_mut(&o) {
                if r.state == RecordState::Acquired
                    && r.lock.as_ref().is_some_and(|(m, _)| m == member)
                {
                    *r = Record {
                        state: RecordState::Archived,
                        delivery_count: r.delivery_count,
                        lock: None,
                    };
                }
            }
        }
        self.advance();
        let mut out = Vec::with_capacity(acquired.len());
        for a in acquired {
            if a.last < first || a.first > last {
                out.push(a);
                continue;
            }
            if a.first < first {
                out.push(AcquiredRecords {
                    last: Offset(first.0 - 1),
                    ..a
                });
            }
            if a.last > last {
                out.push(AcquiredRecords {
                    first: Offset(last.0 + 1),
                    ..a
                });
            }
        }
        out
    }

    /// Gives back every record `member` holds (its share session closed or its connection
    /// dropped): available again, the delivery not counted. How many were released.
    pub fn release_member(&mut self, member: &ShareMemberId) -> usize {
        let mut n = 0;
        for r in self.records.values_mut() {
            if r.state == RecordState::Acquired && r.lock.as_ref().is_some_and(|(m, _)| m == member)
            {
                r.state = RecordState::Available;
                r.delivery_count = (r.delivery_count - 1).max(0);
                r.lock = None;
                n += 1;
            }
        }
        n
    }

    /// Ends the locks that expired by `now_ms`: available again (the delivery counted), or
    /// archived at the delivery limit. How many expired.
    pub fn expire_locks(&mut self, now_ms: i64) -> usize {
        let mut n = 0;
        let limit = self.delivery_limit;
        for r in self.records.values_mut() {
            if r.state == RecordState::Acquired
                && r.lock.as_ref().is_some_and(|(_, t)| *t <= now_ms)
            {
                r.state = if r.delivery_count >= limit {
                    RecordState::Archived
                } else {
                    RecordState::Available
                };
                r.lock = None;
                n += 1;
            }
        }
        if n > 0 {
            self.advance();
        }
        n
    }

    /// The earliest lock expiry (when [`Self::expire_locks`] has work next).
    pub fn next_lock_expiry(&self) -> Option<i64> {
        self.records
            .values()
            .filter_map(|r| r.lock.as_ref().map(|(_, t)| *t))
            .min()
    }

    /// The records `member` holds now, as (offset, delivery count).
    pub fn acquired_by(&self, member: &ShareMemberId) -> Vec<(Offset, i16)> {
        self.records
            .iter()
            .filter(|(_, r)| r.lock.as_ref().is_some_and(|(m, _)| m == member))
            .map(|(o, r)| (Offset(*o), r.delivery_count))
            .collect()
    }

    /// The state of `offset` (`None` below the SPSO or past the window).
    pub fn state_of(&self, offset: Offset) -> Option<(RecordState, i16)> {
        self.records
            .get(&offset.0)
            .map(|r| (r.state, r.delivery_count))
    }

    /// The window to persist: runs of equal state and count from the SPSO, an acquired
    /// record shown as it was before its acquisition.
    pub fn state_batches(&self) -> Vec<StateBatch> {
        let mut out: Vec<StateBatch> = Vec::new();
        for (o, r) in &self.records {
            let (state, count) = match r.state {
                RecordState::Acquired => (RecordState::Available, (r.delivery_count - 1).max(0)),
                s => (s, r.delivery_count),
            };
            match out.last_mut() {
                Some(b) if b.last.0 + 1 == *o && b.state == state && b.delivery_count == count => {
                    b.last = Offset(*o);
                }
                _ => out.push(StateBatch {
                    first: Offset(*o),
                    last: Offset(*o),
                    state,
                    delivery_count: count,
                }),
            }
        }
        out
    }

    /// What to persist after a change made when the SPSO was `start`: that SPSO (as Kafka
    /// 4.1 writes it: the start offset from before the change), the final records passed
    /// since the last write, and the whole window (so a lost write is healed by the next).
    pub fn take_write(&mut self, start: Offset) -> StateWrite {
        let mut batches = std::mem::take(&mut self.passed);
        batches.retain(|b| b.last.0 >= start.0);
        batches.extend(self.state_batches());
        StateWrite { start, batches }
    }

    /// Moves the SPSO past the final records at the front of the window.
    fn advance(&mut self) {
        while let Some(r) = self.records.get(&self.start) {
            if !r.state.is_final() {
                break;
            }
            let (o, state, count) = (self.start, r.state, r.delivery_count);
            match self.passed.last_mut() {
                Some(b) if b.last.0 + 1 == o && b.state == state && b.delivery_count == count => {
                    b.last = Offset(o);
                }
                _ => self.passed.push(StateBatch {
                    first: Offset(o),
                    last: Offset(o),
                    state,
                    delivery_count: count,
                }),
            }
            self.records.remove(&self.start);
            self.start += 1;
        }
        if self.records.is_empty() {
            self.start = self.start.max(self.end);
            self.end = self.start;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str) -> ShareMemberId {
        ShareMemberId(s.into())
    }

    fn batches(spans: &[(i64, i64)]) -> Vec<LogBatch> {
        spans
            .iter()
            .map(|(f, l)| LogBatch {
                first: Offset(*f),
                last: Offset(*l),
            })
            .collect()
    }

    const LIMITS: AcquireLimits = AcquireLimits {
        max_records: 500,
        batch_size: 500,
        lock_ms: 30_000,
    };

    fn acq(first: i64, last: i64, count: i16) -> AcquiredRecords {
        AcquiredRecords {
            first: Offset(first),
            last: Offset(last),
            delivery_count: count,
        }
    }

    fn ack(first: i64, last: i64, t: i8) -> AckBatch {
        AckBatch {
            first: Offset(first),
            last: Offset(last),
            types: vec![t],
        }
    }

    #[test]
    fn an_aborted_batch_is_archived_at_acquisition_and_never_handed_out() {
        let mut p = SharePartition::new(Offset(0), 5, 2000);
        let got = p.acquire(
            &m("a"),
            Offset(0),
            &batches(&[(0, 4), (5, 9), (10, 10)]),
            LIMITS,
            0,
        );
        assert_eq!(got, vec![acq(0, 10, 1)]);
        // 5..=9 belonged to an aborted transaction.
        let got = p.archive_acquired(&m("a"), Offset(5), Offset(9), got);
        assert_eq!(got, vec![acq(0, 4, 1), acq(10, 10, 1)]);
        assert_eq!(p.state_of(Offset(7)), Some((RecordState::Archived, 1)));
        // Once the rest is accepted the start passes the archived batch too.
        p.acknowledge(&m("a"), &[ack(0, 4, 1), ack(10, 10, 1)])
            .unwrap();
        assert_eq!(p.start_offset(), Offset(11));
        // Another member's records are not touched.
        let got = p.acquire(&m("b"), Offset(11), &batches(&[(11, 12)]), LIMITS, 0);
        assert_eq!(
            p.archive_acquired(&m("a"), Offset(11), Offset(12), got.clone())
                .len(),
            0
        );
        assert_eq!(p.state_of(Offset(11)), Some((RecordState::Acquired, 1)));
    }

    #[test]
    fn a_write_after_the_last_acknowledgement_keeps_the_passed_records_and_the_old_start() {
        let mut p = SharePartition::new(Offset(0), 5, 2000);
        p.acquire(&m("a"), Offset(0), &batches(&[(0, 4), (5, 9)]), LIMITS, 0);
        let before = p.start_offset();
        p.acknowledge(&m("a"), &[ack(0, 3, 1), ack(4, 4, 3)])
            .unwrap();
        assert_eq!(p.start_offset(), Offset(5));
        let w = p.take_write(before);
        assert_eq!(w.start, Offset(0));
        let sb = |f: i64, l: i64, state, c| StateBatch {
            first: Offset(f),
            last: Offset(l),
            state,
            delivery_count: c,
        };
        assert_eq!(
            w.batches,
            vec![
                sb(0, 3, RecordState::Acknowledged, 1),
                sb(4, 4, RecordState::Archived, 1),
                sb(5, 9, RecordState::Available, 0),
            ]
        );
        // Reloaded from that write, the window is the same: 5..9 to deliver again.
        let q = SharePartition::load(w.start, &w.batches, 5, 2000);
        assert_eq!(q.start_offset(), Offset(5));
        assert_eq!(q.next_fetch_offset(), Offset(5));
        // Taken once: the next write holds only the window.
        assert_eq!(
            p.take_write(p.start_offset()).batches,
            vec![sb(5, 9, RecordState::Available, 0)]
        );
    }

    #[test]
    fn two_members_never_hold_the_same_record_and_accepted_records_move_the_start() {
        let mut p = SharePartition::new(Offset(0), 5, 2000);
        let log = batches(&[(0, 4), (5, 9)]);
        let got = p.acquire(&m("a"), Offset(0), &log[..1], LIMITS, 0);
        assert_eq!(got, vec![acq(0, 4, 1)]);
        // b reads from where a's records end.
        assert_eq!(p.next_fetch_offset(), Offset(5));
        let got = p.acquire(&m("b"), Offset(5), &log[1..], LIMITS, 0);
        assert_eq!(got, vec![acq(5, 9, 1)]);
        // a cannot acknowledge b's records: nothing of the request is applied.
        assert_eq!(
            p.acknowledge(&m("a"), &[ack(0, 4, 1), ack(5, 5, 1)]),
            Err(AckError::InvalidRecordState(
                "Member is not the owner of batch record".into()
            ))
        );
        assert_eq!(p.start_offset(), Offset(0));
        p.acknowledge(&m("a"), &[ack(0, 4, 1)]).unwrap();
        assert_eq!(p.start_offset(), Offset(5));
        // Below the SPSO: skipped, as Kafka does (nothing is acknowledged twice).
        assert_eq!(p.acknowledge(&m("a"), &[ack(4, 4, 1)]), Ok(()));
        p.acknowledge(&m("b"), &[ack(5, 9, 1)]).unwrap();
        assert_eq!(p.in_flight(), 0);
        assert_eq!(p.start_offset(), Offset(10));
        assert_eq!(p.next_fetch_offset(), Offset(10));
    }

    #[test]
    fn a_released_record_is_delivered_again_and_archived_at_the_delivery_limit() {
        let mut p = SharePartition::new(Offset(0), 2, 2000);
        let log = batches(&[(0, 0)]);
        assert_eq!(
            p.acquire(&m("a"), Offset(0), &log, LIMITS, 0),
            vec![acq(0, 0, 1)]
        );
        p.acknowledge(&m("a"), &[ack(0, 0, 2)]).unwrap();
        assert_eq!(p.state_of(Offset(0)), Some((RecordState::Available, 1)));
        assert_eq!(
            p.acquire(&m("b"), Offset(0), &log, LIMITS, 0),
            vec![acq(0, 0, 2)]
        );
        // The second delivery was the last: released again, it is archived.
        p.acknowledge(&m("b"), &[ack(0, 0, 2)]).unwrap();
        assert_eq!(p.start_offset(), Offset(1));
        assert!(p.acquire(&m("a"), Offset(1), &[], LIMITS, 0).is_empty());
    }

    #[test]
    fn an_expired_lock_counts_the_delivery_and_a_closed_session_gives_it_back() {
        let mut p = SharePartition::new(Offset(10), 3, 2000);
        let log = batches(&[(10, 12)]);
        p.acquire(&m("a"), Offset(10), &log, LIMITS, 1_000);
        assert_eq!(p.next_lock_expiry(), Some(31_000));
        assert_eq!(p.expire_locks(30_999), 0);
        assert_eq!(p.expire_locks(31_000), 3);
        assert_eq!(p.state_of(Offset(11)), Some((RecordState::Available, 1)));
        assert_eq!(
            p.acquire(&m("b"), Offset(10), &log, LIMITS, 40_000),
            vec![acq(10, 12, 2)]
        );
        // b's session closes: the records are available with the delivery not counted.
        assert_eq!(p.release_member(&m("b")), 3);
        assert_eq!(p.state_of(Offset(12)), Some((RecordState::Available, 1)));
        // a acknowledging what it no longer holds is refused.
        assert_eq!(
            p.acknowledge(&m("a"), &[ack(10, 10, 1)]),
            Err(AckError::InvalidRecordState(
                "The batch is not in the acquired state".into()
            ))
        );
    }

    #[test]
    fn max_records_is_met_at_a_batch_boundary_and_batch_size_splits_entries_there() {
        let mut p = SharePartition::new(Offset(0), 5, 2000);
        let log = batches(&[(0, 2), (3, 5), (6, 8), (9, 11)]);
        let limits = AcquireLimits {
            max_records: 4,
            batch_size: 3,
            lock_ms: 1000,
        };
        // 4 records asked: the second batch is taken whole (6), the third not at all.
        let got = p.acquire(&m("a"), Offset(0), &log, limits, 0);
        assert_eq!(got, vec![acq(0, 2, 1), acq(3, 5, 1)]);
        assert_eq!(p.end_offset(), Offset(6));
    }

    #[test]
    fn the_in_flight_limit_stops_new_records_but_not_redeliveries() {
        let mut p = SharePartition::new(Offset(0), 5, 4);
        let log = batches(&[(0, 1), (2, 3), (4, 5)]);
        // A read with room takes what it brought, past the limit.
        let got = p.acquire(&m("a"), Offset(0), &log, LIMITS, 0);
        assert_eq!(got, vec![acq(0, 5, 1)]);
        assert!(!p.can_acquire());
        assert!(p
            .acquire(&m("b"), Offset(6), &batches(&[(6, 7)]), LIMITS, 0)
            .is_empty());
        p.acknowledge(&m("a"), &[ack(2, 3, 2)]).unwrap();
        assert!(p.can_acquire());
        assert_eq!(p.next_fetch_offset(), Offset(2));
        let got = p.acquire(&m("b"), Offset(2), &log[1..], LIMITS, 0);
        assert_eq!(got, vec![acq(2, 3, 2)]);
    }

    #[test]
    fn offsets_a_read_passes_over_are_archived_so_the_start_can_pass_them() {
        let mut p = SharePartition::new(Offset(0), 5, 2000);
        // The log holds 0..=1 and 5..=6 (2..=4 compacted away).
        let got = p.acquire(&m("a"), Offset(0), &batches(&[(0, 1), (5, 6)]), LIMITS, 0);
        assert_eq!(got, vec![acq(0, 1, 1), acq(5, 6, 1)]);
        assert_eq!(p.state_of(Offset(3)), Some((RecordState::Archived, 0)));
        p.acknowledge(&m("a"), &[ack(0, 1, 1), ack(5, 6, 1)])
            .unwrap();
        assert_eq!(p.start_offset(), Offset(7));
    }

    #[test]
    fn malformed_acknowledgements_are_invalid_requests_and_change_nothing() {
        let mut p = SharePartition::new(Offset(0), 5, 2000);
        p.acquire(&m("a"), Offset(0), &batches(&[(0, 9)]), LIMITS, 0);
        let before = p.state_batches();
        for bad in [
            vec![ack(3, 2, 1)],
            vec![ack(4, 6, 1), ack(2, 3, 1)],
            vec![AckBatch {
                first: Offset(0),
                last: Offset(2),
                types: vec![1, 1],
            }],
            vec![ack(0, 0, 4)],
            vec![AckBatch {
                first: Offset(0),
                last: Offset(0),
                types: vec![],
            }],
            vec![ack(0, 10, 1)],
        ] {
            assert!(
                matches!(
                    p.acknowledge(&m("a"), &bad),
                    Err(AckError::InvalidRequest(_))
                ),
                "{bad:?}"
            );
            assert_eq!(p.state_batches(), before);
        }
        // One type per offset.
        p.acknowledge(
            &m("a"),
            &[AckBatch {
                first: Offset(0),
                last: Offset(2),
                types: vec![1, 2, 3],
            }],
        )
        .unwrap();
        assert_eq!(p.start_offset(), Offset(1));
        assert_eq!(p.state_of(Offset(1)), Some((RecordState::Available, 1)));
        assert_eq!(p.state_of(Offset(2)), Some((RecordState::Archived, 1)));
    }

    #[test]
    fn the_persisted_window_reloads_to_the_same_deliveries() {
        let mut p = SharePartition::new(Offset(0), 5, 2000);
        let log = batches(&[(0, 3), (4, 7)]);
        p.acquire(&m("a"), Offset(0), &log, LIMITS, 0);
        p.acknowledge(&m("a"), &[ack(0, 0, 1), ack(2, 2, 3), ack(3, 3, 2)])
            .unwrap();
        let saved = p.state_batches();
        assert_eq!(saved[0].first, Offset(1));
        let mut q = SharePartition::load(p.start_offset(), &saved, 5, 2000);
        assert_eq!(q.start_offset(), Offset(1));
        // Offsets 1 and 4..=7 were acquired (first delivery) when saved: a reload delivers
        // them as that same first delivery; 3 was released once and is on its second.
        let got = q.acquire(&m("b"), Offset(1), &log, LIMITS, 0);
        assert_eq!(
            got,
            vec![acq(1, 1, 1), acq(3, 3, 2), acq(4, 7, 1)],
            "{saved:?}"
        );
    }

    mod model {
        use super::*;
        use proptest::prelude::*;
        use std::collections::{BTreeMap, BTreeSet};

        #[derive(Debug, Clone)]
        enum Op {
            Fetch { member: usize, max_records: usize },
            Ack { member: usize, seed: u64 },
            Stray { member: usize, offset: i64 },
            Close { member: usize },
            Tick { ms: i64 },
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                4 => (0..3usize, 1..8usize).prop_map(|(member, max_records)| Op::Fetch { member, max_records }),
                4 => (0..3usize, any::<u64>()).prop_map(|(member, seed)| Op::Ack { member, seed }),
                1 => (0..3usize, 0..60i64).prop_map(|(member, offset)| Op::Stray { member, offset }),
                1 => (0..3usize).prop_map(|member| Op::Close { member }),
                1 => (1..20_000i64).prop_map(|ms| Op::Tick { ms }),
            ]
        }

        /// The log's batches from `from` on (at most three, as a bounded read).
        fn read(log: &[LogBatch], from: Offset) -> Vec<LogBatch> {
            log.iter()
                .filter(|b| b.last >= from)
                .take(3)
                .copied()
                .collect()
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// Members fetch, acknowledge (accept, release, reject, per offset), acknowledge
            /// what they do not hold, lose their sessions and let locks expire, over a log
            /// with gaps; then one member drains the rest. No record is held by two members
            /// or accepted twice, no delivery exceeds the limit, and in the end every record
            /// is accepted once or archived, with the SPSO at the end of the log.
            #[test]
            fn records_are_accepted_at_most_once_and_delivered_at_most_the_limit(
                sizes in proptest::collection::vec((1..4i64, 0..2i64), 1..15),
                ops in proptest::collection::vec(op(), 1..120),
            ) {
                let limit = 3i16;
                let mut log = Vec::new();
                let mut next = 0i64;
                for (len, gap) in sizes {
                    next += gap;
                    log.push(LogBatch { first: Offset(next), last: Offset(next + len - 1) });
                    next += len;
                }
                let log_end = next;
                let real: BTreeSet<i64> = log.iter().flat_map(|b| b.first.0..=b.last.0).collect();
                let members: Vec<ShareMemberId> = (0..4).map(|i| m(&format!("m{i}"))).collect();
                let mut p = SharePartition::new(Offset(0), limit, 8);
                let mut accepted: BTreeMap<i64, u32> = BTreeMap::new();
                let mut now = 0i64;
                let limits = |max_records| AcquireLimits { max_records, batch_size: 2, lock_ms: 5_000 };
                let fetch = |p: &mut SharePartition, who: &ShareMemberId, max: usize, now: i64,
                             accepted: &BTreeMap<i64, u32>| {
                    let from = p.next_fetch_offset();
                    let got = p.acquire(who, from, &read(&log, from), limits(max), now);
                    for a in &got {
                        prop_assert!(a.delivery_count >= 1 && a.delivery_count <= limit, "{a:?}");
                        for o in a.first.0..=a.last.0 {
                            prop_assert!(real.contains(&o), "acquired {o}, not in the log");
                            prop_assert!(!accepted.contains_key(&o), "{o} delivered after its accept");
                        }
                    }
                    Ok(got)
                };
                for op in ops {
                    match op {
                        Op::Fetch { member, max_records } => {
                            fetch(&mut p, &members[member], max_records, now, &accepted)?;
                        }
                        Op::Ack { member, seed } => {
                            let held = p.acquired_by(&members[member]);
                            if held.is_empty() { continue; }
                            let types: Vec<i8> = (0..held.len()).map(|i| ((seed >> (2 * (i % 32))) % 4) as i8).collect();
                            let batches: Vec<AckBatch> = held.iter().zip(&types).map(|((o, _), t)| AckBatch {
                                first: *o, last: *o, types: vec![*t],
                            }).collect();
                            p.acknowledge(&members[member], &batches).unwrap();
                            for ((o, _), t) in held.iter().zip(&types) {
                                if *t == 1 { *accepted.entry(o.0).or_default() += 1; }
                            }
                        }
                        Op::Stray { member, offset } => {
                            let mine = p.acquired_by(&members[member]).iter().any(|(o, _)| o.0 == offset);
                            if !mine {
                                let before = p.state_batches();
                                let r = p.acknowledge(&members[member], &[AckBatch { first: Offset(offset), last: Offset(offset), types: vec![1] }]);
                                if offset >= p.start_offset().0 {
                                    prop_assert!(r.is_err(), "acknowledged {offset} it did not hold");
                                }
                                prop_assert_eq!(p.state_batches(), before);
                            }
                        }
                        Op::Close { member } => { p.release_member(&members[member]); }
                        Op::Tick { ms } => { now += ms; p.expire_locks(now); }
                    }
                    prop_assert!(p.start_offset() <= p.next_fetch_offset());
                    prop_assert!(p.next_fetch_offset() <= p.end_offset());
                    let mut holders: BTreeMap<i64, usize> = BTreeMap::new();
                    for who in &members {
                        for (o, _) in p.acquired_by(who) { *holders.entry(o.0).or_default() += 1; }
                    }
                    prop_assert!(holders.values().all(|n| *n == 1));
                }
                // Drain: the others' sessions close; one member accepts everything left.
                for who in &members[..3] { p.release_member(who); }
                let drain = &members[3];
                for _ in 0..(4 * log.len() + 8) {
                    let got = fetch(&mut p, drain, 100, now, &accepted)?;
                    let batches: Vec<AckBatch> = got.iter().map(|a| AckBatch { first: a.first, last: a.last, types: vec![1] }).collect();
                    p.acknowledge(drain, &batches).unwrap();
                    for a in &got { for o in a.first.0..=a.last.0 { *accepted.entry(o).or_default() += 1; } }
                    if p.start_offset().0 >= log_end { break; }
                }
                prop_assert_eq!(p.start_offset(), Offset(log_end));
                prop_assert!(accepted.values().all(|n| *n == 1), "{accepted:?}");
            }
        }
    }
}
