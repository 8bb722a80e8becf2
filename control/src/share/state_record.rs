//! The share coordinator's records on `__share_group_state`, in Kafka 4.1's format, and the
//! state they add up to.
//!
//! Key (type 0 ShareSnapshot, type 1 ShareUpdate; both version 0, not flexible): `GroupId`,
//! `TopicId`, `Partition`. ShareSnapshot value v0 (flexible): `SnapshotEpoch`, `StateEpoch`,
//! `LeaderEpoch`, `StartOffset`, `CreateTimestamp`, `WriteTimestamp`, `StateBatches`;
//! ShareUpdate value v0: `SnapshotEpoch`, `LeaderEpoch`, `StartOffset` (-1: unchanged),
//! `StateBatches`. A state batch is `FirstOffset`, `LastOffset`, `DeliveryState` (0, 2 or 4),
//! `DeliveryCount`. A tombstone deletes the key.
//!
//! A share partition's key lives on partition `abs(hash("group:topicId:partition")) %
//! partitions` of the topic (Java's `String.hashCode`, the topic id in Kafka's base64 form,
//! `Utils.abs` taking `i32::MIN` to 0), so Kafka's tools find it where Kafka would put it.

use std::collections::BTreeMap;

use base64::Engine as _;
use kmirror_types::Offset;

use super::partition::{RecordState, StateBatch};
use crate::coordinator_record::{self as rec, DecodeError, Reader, Writer};

/// ShareSnapshot's record type.
pub const SNAPSHOT: i16 = 0;
/// ShareUpdate's record type.
pub const UPDATE: i16 = 1;

/// Kafka's string form of a topic id (URL-safe base64 without padding, 22 characters).
pub fn kafka_uuid_string(id: uuid::Uuid) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.as_bytes())
}

/// The `__share_group_state` partition of (group, topic, partition) among `partitions`.
pub fn state_partition(group: &str, topic: uuid::Uuid, partition: i32, partitions: i32) -> i32 {
    let key = format!("{group}:{}:{partition}", kafka_uuid_string(topic));
    let h = key
        .encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)));
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions.max(1)
}

/// The key of a share partition's records.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateKey {
    pub group: String,
    pub topic: uuid::Uuid,
    pub partition: i32,
}

/// A share partition's stored state (what ShareSnapshot holds; updates fold into it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareState {
    pub snapshot_epoch: i32,
    pub state_epoch: i32,
    pub leader_epoch: i32,
    pub start_offset: i64,
    pub create_ms: i64,
    pub write_ms: i64,
    pub batches: Vec<StateBatch>,
}

/// A ShareUpdate value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareUpdate {
    pub snapshot_epoch: i32,
    pub leader_epoch: i32,
    /// -1: unchanged.
    pub start_offset: i64,
    pub batches: Vec<StateBatch>,
}

/// One decoded record of `__share_group_state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateRecord {
    Snapshot(StateKey, ShareState),
    Update(StateKey, ShareUpdate),
    /// The key's state is deleted.
    Tombstone(StateKey),
}

fn write_key(record_type: i16, k: &StateKey) -> Vec<u8> {
    rec::key(record_type, |w| {
        w.string(&k.group);
        w.uuid(k.topic);
        w.i32(k.partition);
    })
}

fn write_batches(w: &mut Writer, batches: &[StateBatch]) {
    w.array_len(batches.len());
    for b in batches {
        w.i64(b.first.0);
        w.i64(b.last.0);
        w.i8(b.state.code());
        w.i16(b.delivery_count);
        w.no_tagged_fields();
    }
}

fn read_batches(r: &mut Reader<'_>) -> Result<Vec<StateBatch>, DecodeError> {
    let n = r.array_len()?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let first = Offset(r.i64()?);
        let last = Offset(r.i64()?);
        let code = r.i8()?;
        let state = RecordState::from_code(code).ok_or_else(|| format!("delivery state {code}"))?;
        let delivery_count = r.i16()?;
        r.tagged_fields(|_, _| Ok(()))?;
        out.push(StateBatch {
            first,
            last,
            state,
            delivery_count,
        });
    }
    Ok(out)
}

impl StateRecord {
    /// The share partition the record is about.
    pub fn key(&self) -> &StateKey {
        match self {
            StateRecord::Snapshot(k, _) | StateRecord::Update(k, _) | StateRecord::Tombstone(k) => {
                k
            }
        }
    }

    /// The record's key and value (`None`: tombstone) bytes.
    pub fn encode(&self) -> (Vec<u8>, Option<Vec<u8>>) {
        match self {
            StateRecord::Snapshot(k, s) => (
                write_key(SNAPSHOT, k),
                Some(rec::value(0, 0, |w| {
                    w.i32(s.snapshot_epoch);
                    w.i32(s.state_epoch);
                    w.i32(s.leader_epoch);
                    w.i64(s.start_offset);
                    w.i64(s.create_ms);
                    w.i64(s.write_ms);
                    write_batches(w, &s.batches);
                    w.no_tagged_fields();
                })),
            ),
            StateRecord::Update(k, u) => (
                write_key(UPDATE, k),
                Some(rec::value(0, 0, |w| {
                    w.i32(u.snapshot_epoch);
                    w.i32(u.leader_epoch);
                    w.i64(u.start_offset);
                    write_batches(w, &u.batches);
                    w.no_tagged_fields();
                })),
            ),
            // Kafka deletes a share partition's state with a ShareSnapshot-keyed tombstone.
            StateRecord::Tombstone(k) => (write_key(SNAPSHOT, k), None),
        }
    }

    /// Decodes a record of `__share_group_state`.
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<StateRecord, DecodeError> {
        let (record_type, mut r) = Reader::key(key)?;
        let k = StateKey {
            group: r.string()?,
            topic: r.uuid()?,
            partition: r.i32()?,
        };
        r.end()?;
        let Some(value) = value else {
            return Ok(StateRecord::Tombstone(k));
        };
        let (_, mut r) = Reader::value(value, 0..=0, 0)?;
        let out = match record_type {
            SNAPSHOT => StateRecord::Snapshot(
                k,
                ShareState {
                    snapshot_epoch: r.i32()?,
                    state_epoch: r.i32()?,
                    leader_epoch: r.i32()?,
                    start_offset: r.i64()?,
                    create_ms: r.i64()?,
                    write_ms: r.i64()?,
                    batches: read_batches(&mut r)?,
                },
            ),
            UPDATE => StateRecord::Update(
                k,
                ShareUpdate {
                    snapshot_epoch: r.i32()?,
                    leader_epoch: r.i32()?,
                    start_offset: r.i64()?,
                    batches: read_batches(&mut r)?,
                },
            ),
            t => return Err(format!("record type {t} is not a share state record")),
        };
        r.tagged_fields(|_, _| Ok(()))?;
        r.end()?;
        Ok(out)
    }
}

impl ShareState {
    /// Folds an update in: its batches win where they overlap the stored ones, a new start
    /// offset (or leader epoch) replaces the stored one, and batches wholly below the start
    /// offset are dropped (one straddling it is cut at it).
    pub fn apply(&mut self, u: &ShareUpdate) {
        if u.leader_epoch != -1 {
            self.leader_epoch = u.leader_epoch;
        }
        if u.start_offset != -1 {
            self.start_offset = u.start_offset;
        }
        self.batches = combine(&self.batches, &u.batches, self.start_offset);
    }
}

/// `old` overwritten by `new` where they overlap, cut at `start`, merged into runs.
pub fn combine(old: &[StateBatch], new: &[StateBatch], start: i64) -> Vec<StateBatch> {
    // Ranges keyed by first offset, never overlapping.
    let mut map: BTreeMap<i64, StateBatch> = BTreeMap::new();
    for b in old.iter().chain(new) {
        let (f, l) = (b.first.0, b.last.0);
        if l < f {
            continue;
        }
        let overlapping: Vec<i64> = map
            .range(..=l)
            .filter(|(_, o)| o.last.0 >= f)
            .map(|(k, _)| *k)
            .collect();
        for k in overlapping {
            let o = map.remove(&k).expect("listed");
            if o.first.0 < f {
                map.insert(
                    o.first.0,
                    StateBatch {
                        last: Offset(f - 1),
                        ..o
                    },
                );
            }
            if o.last.0 > l {
                map.insert(
                    l + 1,
                    StateBatch {
                        first: Offset(l + 1),
                        ..o
                    },
                );
            }
        }
        map.insert(f, *b);
    }
    let mut out: Vec<StateBatch> = Vec::new();
    for mut b in map.into_values() {
        if b.last.0 < start {
            continue;
        }
        if b.first.0 < start {
            b.first = Offset(start);
        }
        match out.last_mut() {
            Some(p)
                if p.last.0 + 1 == b.first.0
                    && p.state == b.state
                    && p.delivery_count == b.delivery_count =>
            {
                p.last = b.last;
            }
            _ => out.push(b),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::share::test_support::sb;

    fn key() -> StateKey {
        StateKey {
            group: "g".into(),
            topic: uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef),
            partition: 3,
        }
    }

    #[test]
    fn records_round_trip_in_kafkas_layout() {
        let snap = StateRecord::Snapshot(
            key(),
            ShareState {
                snapshot_epoch: 2,
                state_epoch: 1,
                leader_epoch: 5,
                start_offset: 10,
                create_ms: 1,
                write_ms: 2,
                batches: vec![sb(10, 12, RecordState::Acknowledged, 1)],
            },
        );
        let (k, v) = snap.encode();
        // Type 0, then GroupId as an int16-length string, the uuid, the partition.
        assert_eq!(&k[..5], &[0, 0, 0, 1, b'g']);
        assert_eq!(k.len(), 2 + 3 + 16 + 4);
        let v = v.unwrap();
        // Version 0, then flexible fields; one batch: compact array length 2.
        assert_eq!(&v[..2], &[0, 0]);
        assert_eq!(v[2 + 4 * 3 + 8 * 3], 2);
        assert_eq!(StateRecord::decode(&k, Some(&v)).unwrap(), snap);
        let upd = StateRecord::Update(
            key(),
            ShareUpdate {
                snapshot_epoch: 2,
                leader_epoch: -1,
                start_offset: -1,
                batches: vec![sb(13, 13, RecordState::Archived, 3)],
            },
        );
        let (k, v) = upd.encode();
        assert_eq!(StateRecord::decode(&k, v.as_deref()).unwrap(), upd);
        let (k, v) = StateRecord::Tombstone(key()).encode();
        assert_eq!(
            StateRecord::decode(&k, v.as_deref()).unwrap(),
            StateRecord::Tombstone(key())
        );
        assert!(StateRecord::decode(&k, Some(&[0, 1])).is_err());
    }

    #[test]
    fn topic_ids_print_as_kafka_and_keys_map_to_a_partition_in_range() {
        assert_eq!(
            kafka_uuid_string(uuid::Uuid::nil()),
            "AAAAAAAAAAAAAAAAAAAAAA"
        );
        let p = state_partition("g", key().topic, 3, 50);
        assert!((0..50).contains(&p));
        assert_eq!(p, state_partition("g", key().topic, 3, 50));
    }

    #[test]
    fn an_update_overwrites_what_it_overlaps_and_the_start_offset_cuts() {
        let mut s = ShareState {
            snapshot_epoch: 0,
            state_epoch: 0,
            leader_epoch: 1,
            start_offset: 0,
            create_ms: 0,
            write_ms: 0,
            batches: vec![sb(0, 9, RecordState::Available, 1)],
        };
        s.apply(&ShareUpdate {
            snapshot_epoch: 0,
            leader_epoch: -1,
            start_offset: 3,
            batches: vec![
                sb(0, 2, RecordState::Acknowledged, 1),
                sb(5, 6, RecordState::Archived, 2),
            ],
        });
        assert_eq!(s.start_offset, 3);
        assert_eq!(s.leader_epoch, 1);
        assert_eq!(
            s.batches,
            vec![
                sb(3, 4, RecordState::Available, 1),
                sb(5, 6, RecordState::Archived, 2),
                sb(7, 9, RecordState::Available, 1),
            ]
        );
    }
}
