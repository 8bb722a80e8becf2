//! Coordinator payloads as Kafka RecordBatch v2 bytes, the form in which the group and
//! transaction coordinators write their state into the `__consumer_offsets` /
//! `__transaction_state` partitions, as Apache Kafka does, so that Kafka's tools
//! (`OffsetsMessageFormatter`, `kafka-dump-log --offsets-decoder`) read them.
//!
//! One flush's payloads ([`Payload`]) become batches in order:
//!
//! - a run of [`Payload::Record`]s: one plain batch (attributes 0, no producer), one record
//!   each, with the payload's headers as the record's headers;
//! - a run of [`Payload::Transactional`]s of one producer: one transactional batch of that
//!   producer (epoch 0, no sequence), as Kafka writes a TxnOffsetCommit's offsets;
//! - a [`Payload::Marker`]: one control batch holding Kafka's EndTransactionMarker, plus a
//!   `kmirror.group` header naming the group. Kafka's marker ends the producer's transaction
//!   for every group of the partition; kmirror's coordinator applies markers per group, so it
//!   needs the name back on replay (Kafka's readers ignore headers).
//!
//! [`Payload::ProducerIdBlock`] has no batch form: producer-id blocks come from the metadata
//! quorum and never go to a coordinator partition.
//!
//! Batches are uncompressed: decoding refuses compressed ones rather than carrying a codec
//! for records only kmirror writes.

use kmirror_log::batch::{
    self, BatchError, BatchSpec, Compression, RecordParts, CONTROL_ATTRIBUTES, CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT, HEADER_SIZE, LOG_OVERHEAD, TRANSACTIONAL_ATTRIBUTES,
};

use crate::coordinator_record::Payload;

/// The record header of a control batch that names the marker's group.
const GROUP_HEADER: &str = "kmirror.group";
/// The coordinator epoch written into markers: kmirror's transaction coordinator fences with
/// 0 throughout (see the net crate's markers), so a marker written here matches the markers
/// it sends to data partitions.
const MARKER_COORDINATOR_EPOCH: i32 = 0;
/// The producer epoch of transactional and control batches: the coordinator's replay keys
/// transactions by producer id alone.
const PRODUCER_EPOCH: i16 = 0;

/// What a batch is, for the log append that takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchKind {
    /// Non-transactional records.
    Plain,
    /// Records of `producer_id`'s open transaction.
    Transactional { producer_id: i64 },
    /// The end of `producer_id`'s transaction (COMMIT or ABORT).
    Control { producer_id: i64, commit: bool },
}

/// One encoded batch: base offset 0 (the log assigns the real one on append).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub bytes: Vec<u8>,
    pub kind: BatchKind,
}

/// Why payloads do not encode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("payload {index} is a producer-id block, which never goes to a coordinator partition (the metadata quorum hands them out)")]
    ProducerIdBlock { index: usize },
    #[error(
        "a batch of payloads {first}..{end} would take {bytes} bytes, more than a batch can hold"
    )]
    TooLarge {
        first: usize,
        end: usize,
        bytes: usize,
    },
}

/// Why bytes read from a coordinator partition do not decode. `at` is the byte position of
/// the batch at fault in the decoded input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Framing, CRC or count check of the log's batch validation failed (this includes a
    /// batch cut short: decode whole batches only).
    #[error("batch at byte {at}: {source}")]
    Batch {
        at: usize,
        #[source]
        source: BatchError,
    },
    #[error("batch at byte {at} is compressed ({codec:?}); coordinator batches are written uncompressed")]
    Compressed { at: usize, codec: Compression },
    #[error("batch at byte {at} is transactional or control but has no producer id")]
    NoProducerId { at: usize },
    #[error("batch at byte {at}, record {index}: {reason}")]
    MalformedRecord {
        at: usize,
        index: usize,
        reason: &'static str,
    },
    #[error("control batch at byte {at} is not a transaction marker: {reason}")]
    NotAMarker { at: usize, reason: &'static str },
    #[error("control batch at byte {at} has control type {control_type}, not COMMIT or ABORT")]
    UnknownControlType { at: usize, control_type: i16 },
    #[error("control batch at byte {at} has no `kmirror.group` header naming the group it ends the transaction for")]
    MissingGroupHeader { at: usize },
}

/// Encodes one flush's payloads (in order) into batches for one coordinator partition.
/// Offsets in the batches start at 0 (the log assigns the real ones on append);
/// `leader_epoch` goes into partitionLeaderEpoch, `timestamp_ms` is every record's CreateTime.
/// Markers carry coordinator epoch 0 and every transactional or control batch producer epoch
/// 0. A run is one batch whatever its size (no splitting at max.message.bytes).
pub fn encode(
    payloads: &[Payload],
    leader_epoch: i32,
    timestamp_ms: i64,
) -> Result<Vec<Batch>, EncodeError> {
    let spec = |attributes, producer_id, producer_epoch| BatchSpec {
        base_offset: 0,
        partition_leader_epoch: leader_epoch,
        attributes,
        base_timestamp: timestamp_ms,
        producer_id,
        producer_epoch,
        base_sequence: -1,
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < payloads.len() {
        let first = i;
        let (bytes, kind) = match &payloads[i] {
            Payload::Record { .. } => {
                let mut records = Vec::new();
                while let Some(Payload::Record {
                    key,
                    value,
                    headers,
                }) = payloads.get(i)
                {
                    records.push(RecordParts {
                        key: Some(key),
                        value: value.as_deref(),
                        headers: headers
                            .iter()
                            .map(|(k, v)| (k.as_str(), Some(&v[..])))
                            .collect(),
                    });
                    i += 1;
                }
                let bytes = batch::build_batch_with_headers(&spec(0, -1, -1), &records);
                (bytes, BatchKind::Plain)
            }
            Payload::Transactional { producer_id, .. } => {
                let producer_id = *producer_id;
                let mut records = Vec::new();
                while let Some(Payload::Transactional {
                    producer_id: p,
                    key,
                    value,
                }) = payloads.get(i)
                {
                    if *p != producer_id {
                        break;
                    }
                    records.push(RecordParts {
                        key: Some(key),
                        value: value.as_deref(),
                        headers: Vec::new(),
                    });
                    i += 1;
                }
                let s = spec(TRANSACTIONAL_ATTRIBUTES, producer_id, PRODUCER_EPOCH);
                let bytes = batch::build_batch_with_headers(&s, &records);
                (bytes, BatchKind::Transactional { producer_id })
            }
            Payload::Marker {
                producer_id,
                commit,
                group,
            } => {
                i += 1;
                let control_type = if *commit {
                    CONTROL_TYPE_COMMIT
                } else {
                    CONTROL_TYPE_ABORT
                };
                // Kafka's EndTransactionMarker: key (version 0, type), value (version 0,
                // coordinator epoch).
                let mut key = 0i16.to_be_bytes().to_vec();
                key.extend_from_slice(&control_type.to_be_bytes());
                let mut value = 0i16.to_be_bytes().to_vec();
                value.extend_from_slice(&MARKER_COORDINATOR_EPOCH.to_be_bytes());
                let record = RecordParts {
                    key: Some(&key),
                    value: Some(&value),
                    headers: vec![(GROUP_HEADER, Some(group.as_bytes()))],
                };
                let s = spec(CONTROL_ATTRIBUTES, *producer_id, PRODUCER_EPOCH);
                let bytes = batch::build_batch_with_headers(&s, &[record]);
                let kind = BatchKind::Control {
                    producer_id: *producer_id,
                    commit: *commit,
                };
                (bytes, kind)
            }
            Payload::ProducerIdBlock { .. } => {
                return Err(EncodeError::ProducerIdBlock { index: i });
            }
        };
        // The builder writes batchLength as an i32; a longer batch would wrap it.
        if i32::try_from(bytes.len() - LOG_OVERHEAD).is_err() {
            return Err(EncodeError::TooLarge {
                first,
                end: i,
                bytes: bytes.len(),
            });
        }
        out.push(Batch { bytes, kind });
    }
    Ok(out)
}

/// Decodes batches read back from such a partition (several whole batches back to back, as a
/// log read returns them) into payloads, in order. Every batch must pass the log's
/// validation (CRC included). Batches the cleaner emptied (no records left) yield nothing;
/// offset gaps the cleaner left are fine. Headers of transactional records are ignored
/// ([`Payload::Transactional`] has none; encode writes none).
pub fn decode(bytes: &[u8]) -> Result<Vec<Payload>, DecodeError> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let (h, total) =
            batch::validate(&bytes[at..]).map_err(|source| DecodeError::Batch { at, source })?;
        let codec = h.compression();
        if codec != Compression::None {
            return Err(DecodeError::Compressed { at, codec });
        }
        let records = parse_records(&bytes[at + HEADER_SIZE..at + total], h.records_count())
            .map_err(|(index, reason)| DecodeError::MalformedRecord { at, index, reason })?;
        let producer_id = h.producer_id();
        if records.is_empty() {
            // Emptied by the cleaner: kept only for its offsets and producer state.
        } else if h.is_control() {
            if producer_id < 0 {
                return Err(DecodeError::NoProducerId { at });
            }
            out.push(marker(at, producer_id, &records)?);
        } else if h.is_transactional() {
            if producer_id < 0 {
                return Err(DecodeError::NoProducerId { at });
            }
            for (index, r) in records.into_iter().enumerate() {
                out.push(Payload::Transactional {
                    producer_id,
                    key: non_null_key(at, index, r.key)?,
                    value: r.value.map(<[u8]>::to_vec),
                });
            }
        } else {
            for (index, r) in records.into_iter().enumerate() {
                let bad = |reason| DecodeError::MalformedRecord { at, index, reason };
                let headers = r
                    .headers
                    .iter()
                    .map(|&(k, v)| {
                        let k = std::str::from_utf8(k).map_err(|_| bad("header key not UTF-8"))?;
                        let v = v.ok_or_else(|| bad("null header value"))?;
                        Ok((k.to_string(), v.to_vec()))
                    })
                    .collect::<Result<_, DecodeError>>()?;
                out.push(Payload::Record {
                    key: non_null_key(at, index, r.key)?,
                    value: r.value.map(<[u8]>::to_vec),
                    headers,
                });
            }
        }
        at += total;
    }
    Ok(out)
}

fn non_null_key(at: usize, index: usize, key: Option<&[u8]>) -> Result<Vec<u8>, DecodeError> {
    key.map(<[u8]>::to_vec).ok_or(DecodeError::MalformedRecord {
        at,
        index,
        reason: "null key (coordinator records are keyed)",
    })
}

/// The marker of a control batch's records, read as Kafka's `ControlRecordType` /
/// `EndTransactionMarker` read them (a newer key or value version is read as version 0).
fn marker(at: usize, producer_id: i64, records: &[Record<'_>]) -> Result<Payload, DecodeError> {
    let not = |reason| DecodeError::NotAMarker { at, reason };
    let [r] = records else {
        return Err(not("more than one record"));
    };
    let key = r.key.ok_or_else(|| not("null key"))?;
    let (version, control_type) = match key {
        [v0, v1, t0, t1, ..] => (
            i16::from_be_bytes([*v0, *v1]),
            i16::from_be_bytes([*t0, *t1]),
        ),
        _ => return Err(not("key shorter than 4 bytes")),
    };
    if version < 0 {
        return Err(not("negative key version"));
    }
    let commit = match control_type {
        CONTROL_TYPE_COMMIT => true,
        CONTROL_TYPE_ABORT => false,
        control_type => return Err(DecodeError::UnknownControlType { at, control_type }),
    };
    match r.value {
        Some([v0, v1, _, _, _, _, ..]) if i16::from_be_bytes([*v0, *v1]) >= 0 => {}
        _ => return Err(not("value is not version >= 0 and a coordinator epoch")),
    }
    let mut groups = r
        .headers
        .iter()
        .filter(|(k, _)| *k == GROUP_HEADER.as_bytes());
    let (Some((_, group)), None) = (groups.next(), groups.next()) else {
        if r.headers.iter().any(|(k, _)| *k == GROUP_HEADER.as_bytes()) {
            return Err(not("more than one group header"));
        }
        return Err(DecodeError::MissingGroupHeader { at });
    };
    let group = group
        .and_then(|g| std::str::from_utf8(g).ok())
        .ok_or_else(|| not("group header is null or not UTF-8"))?;
    Ok(Payload::Marker {
        producer_id,
        commit,
        group: group.to_string(),
    })
}

/// One record of a batch, borrowed from its bytes.
struct Record<'a> {
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    headers: Vec<(&'a [u8], Option<&'a [u8]>)>,
}

/// The records of an uncompressed records section, which must hold exactly `count`. Offset
/// and timestamp deltas are not checked: compaction leaves gaps, and payloads carry neither.
/// Nothing is allocated from a count or length read off the bytes. Errors name the record.
fn parse_records(section: &[u8], count: i32) -> Result<Vec<Record<'_>>, (usize, &'static str)> {
    let mut records = Vec::new();
    let mut rest = section;
    while !rest.is_empty() {
        let index = records.len();
        if index as i64 >= i64::from(count) {
            return Err((index, "bytes remain after the records the batch declares"));
        }
        let mut c = Cursor(rest);
        let len = c.len().ok_or((index, "bad record length"))?;
        let body = c.take(len).ok_or((index, "record runs past the batch"))?;
        rest = c.0;
        records.push(parse_record(body).ok_or((index, "record fields do not fit its length"))?);
    }
    if records.len() as i64 != i64::from(count) {
        return Err((records.len(), "batch declares more records than it holds"));
    }
    Ok(records)
}

/// A record's fields after its length: attributes, timestampDelta, offsetDelta, key, value,
/// headers. None unless they fill `body` exactly.
fn parse_record(body: &[u8]) -> Option<Record<'_>> {
    let mut c = Cursor(body.get(1..)?); // attributes: unused in v2 records
    c.varint()?; // timestampDelta
    c.varint()?; // offsetDelta
    let key = c.nullable()?;
    let value = c.nullable()?;
    let n = c.varint()?;
    if n < 0 {
        return None;
    }
    let mut headers = Vec::new();
    for _ in 0..n {
        let k = c.nullable()??;
        headers.push((k, c.nullable()?));
    }
    c.0.is_empty().then_some(Record {
        key,
        value,
        headers,
    })
}

/// Reads varint-framed fields off the front of a slice.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn varint(&mut self) -> Option<i64> {
        let (v, n) = batch::read_varint(self.0)?;
        self.0 = &self.0[n..];
        Some(v)
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }

    /// A non-negative length.
    fn len(&mut self) -> Option<usize> {
        usize::try_from(self.varint()?).ok()
    }

    /// Length-prefixed bytes, length -1 for null; None if malformed.
    fn nullable(&mut self) -> Option<Option<&'a [u8]>> {
        match self.varint()? {
            -1 => Some(None),
            n => Some(Some(self.take(usize::try_from(n).ok()?)?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator_record as cr;
    use kmirror_log::batch::{
        build_batch, build_control_batch, control_record, validate, ATTRIBUTES_POS, CRC_POS,
    };
    use proptest::prelude::*;

    fn rec(key: &[u8], value: Option<&[u8]>, headers: &[(&str, &[u8])]) -> Payload {
        Payload::Record {
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_vec()))
                .collect(),
        }
    }

    fn txn(producer_id: i64, key: &[u8], value: Option<&[u8]>) -> Payload {
        Payload::Transactional {
            producer_id,
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
        }
    }

    fn marker(producer_id: i64, commit: bool, group: &str) -> Payload {
        Payload::Marker {
            producer_id,
            commit,
            group: group.into(),
        }
    }

    /// Records, tombstones, headers, two producers' transactional runs, commit and abort.
    fn mixed() -> Vec<Payload> {
        vec![
            rec(b"\0\x02a", Some(b"v1"), &[]),
            rec(b"\0\x02b", None, &[]),
            rec(
                b"\0\x00t",
                Some(b"v2"),
                &[("kmirror.groups", b"g1"), ("x", b"")],
            ),
            txn(7, b"\0\x01k1", Some(b"o1")),
            txn(7, b"\0\x01k2", None),
            txn(8, b"\0\x01k3", Some(b"o3")),
            marker(7, true, "g1"),
            marker(8, false, "g2"),
            rec(b"\0\x01k4", Some(b""), &[]),
            txn(7, b"\0\x01k5", Some(b"o5")),
        ]
    }

    fn concat(batches: &[Batch]) -> Vec<u8> {
        batches.iter().flat_map(|b| b.bytes.clone()).collect()
    }

    fn refresh_crc(b: &mut [u8]) {
        let crc = crc32c::crc32c(&b[ATTRIBUTES_POS..]);
        b[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    }

    #[test]
    fn mixed_sequence_round_trips() {
        let payloads = mixed();
        let batches = encode(&payloads, 3, 1_700_000_000_000).unwrap();
        assert_eq!(decode(&concat(&batches)).unwrap(), payloads);
        assert_eq!(encode(&[], 0, 0).unwrap(), []);
        assert_eq!(decode(&[]).unwrap(), []);
    }

    #[test]
    fn batches_break_where_the_kind_or_producer_changes() {
        let batches = encode(&mixed(), 3, 1234).unwrap();
        let kinds: Vec<_> = batches.iter().map(|b| b.kind).collect();
        assert_eq!(
            kinds,
            [
                BatchKind::Plain,
                BatchKind::Transactional { producer_id: 7 },
                BatchKind::Transactional { producer_id: 8 },
                BatchKind::Control {
                    producer_id: 7,
                    commit: true
                },
                BatchKind::Control {
                    producer_id: 8,
                    commit: false
                },
                BatchKind::Plain,
                BatchKind::Transactional { producer_id: 7 },
            ]
        );
        // (records, attributes, producer id, producer epoch) per batch.
        let expected = [
            (3, 0, -1, -1),
            (2, TRANSACTIONAL_ATTRIBUTES, 7, 0),
            (1, TRANSACTIONAL_ATTRIBUTES, 8, 0),
            (1, CONTROL_ATTRIBUTES, 7, 0),
            (1, CONTROL_ATTRIBUTES, 8, 0),
            (1, 0, -1, -1),
            (1, TRANSACTIONAL_ATTRIBUTES, 7, 0),
        ];
        for (b, (count, attributes, pid, epoch)) in batches.iter().zip(expected) {
            let (h, total) = validate(&b.bytes).unwrap();
            assert_eq!(total, b.bytes.len());
            assert_eq!(h.records_count(), count);
            assert_eq!(h.last_offset_delta(), count - 1);
            assert_eq!(h.attributes(), attributes);
            assert_eq!((h.producer_id(), h.producer_epoch()), (pid, epoch));
            assert_eq!(h.base_sequence(), -1);
            assert_eq!(h.base_offset(), 0);
            assert_eq!(h.partition_leader_epoch(), 3);
            assert_eq!((h.base_timestamp(), h.max_timestamp()), (1234, 1234));
            assert!(!h.is_log_append_time());
        }
    }

    #[test]
    fn a_marker_is_kafkas_end_transaction_marker_with_the_group_header() {
        let [b] = &encode(&[marker(9, true, "grp")], 0, 5).unwrap()[..] else {
            panic!("one batch");
        };
        assert_eq!(control_record(&b.bytes), Some((CONTROL_TYPE_COMMIT, 0)));
        let r = parse_records(&b.bytes[HEADER_SIZE..], 1).unwrap();
        assert_eq!(r[0].key, Some(&[0, 0, 0, 1][..]));
        assert_eq!(r[0].value, Some(&[0, 0, 0, 0, 0, 0][..]));
        assert_eq!(r[0].headers, [(&b"kmirror.group"[..], Some(&b"grp"[..]))]);
        let abort = &encode(&[marker(9, false, "grp")], 0, 5).unwrap()[0];
        assert_eq!(control_record(&abort.bytes), Some((CONTROL_TYPE_ABORT, 0)));
    }

    #[test]
    fn offset_commit_key_and_value_bytes_come_out_unchanged() {
        // OffsetCommitKey (type 1) and OffsetCommitValue v4 as the group coordinator writes.
        let key = cr::key(1, |w| {
            w.string("group");
            w.string("topic");
            w.i32(3);
        });
        let value = cr::value(4, 4, |w| {
            w.i64(42);
            w.i32(-1);
            w.string("meta");
            w.i64(1_700_000_000_000);
            w.no_tagged_fields();
        });
        let payloads = [
            Payload::record(key.clone(), Some(value.clone())),
            Payload::Transactional {
                producer_id: 4,
                key: key.clone(),
                value: Some(value.clone()),
            },
        ];
        let batches = encode(&payloads, 0, 0).unwrap();
        for b in &batches {
            let r = parse_records(&b.bytes[HEADER_SIZE..], 1).unwrap();
            assert_eq!((r[0].key, r[0].value), (Some(&key[..]), Some(&value[..])));
        }
        assert_eq!(decode(&concat(&batches)).unwrap(), payloads);
    }

    #[test]
    fn producer_id_blocks_do_not_encode() {
        let e = encode(
            &[rec(b"k", None, &[]), Payload::ProducerIdBlock { end: 100 }],
            0,
            0,
        )
        .unwrap_err();
        assert_eq!(e, EncodeError::ProducerIdBlock { index: 1 });
    }

    #[test]
    fn decode_refuses_compressed_batches() {
        let mut b = encode(&[rec(b"k", Some(b"v"), &[])], 0, 0).unwrap()[0]
            .bytes
            .clone();
        b[ATTRIBUTES_POS + 1] |= 1; // gzip
        refresh_crc(&mut b);
        let e = decode(&b).unwrap_err();
        assert_eq!(
            e,
            DecodeError::Compressed {
                at: 0,
                codec: Compression::Gzip
            }
        );
        assert!(e.to_string().contains("compressed"), "{e}");
    }

    #[test]
    fn decode_refuses_a_bad_crc() {
        let batches = encode(&mixed(), 0, 0).unwrap();
        let first = batches[0].bytes.len();
        let mut b = concat(&batches);
        let last = b.len() - 1;
        b[last] ^= 1;
        let e = decode(&b).unwrap_err();
        let at = b.len() - batches.last().unwrap().bytes.len();
        assert!(
            matches!(e, DecodeError::Batch { at: a, source: BatchError::CrcMismatch { .. } } if a == at),
            "{e}"
        );
        b[last] ^= 1;
        b[first + HEADER_SIZE] ^= 1;
        assert!(matches!(
            decode(&b).unwrap_err(),
            DecodeError::Batch { at, source: BatchError::CrcMismatch { .. } } if at == first
        ));
    }

    #[test]
    fn decode_refuses_a_control_batch_without_the_group_header() {
        // Kafka's own marker, as the log writes it into data partitions.
        let b = build_control_batch(0, 0, 5, 0, CONTROL_TYPE_COMMIT, 0, 0);
        let e = decode(&b).unwrap_err();
        assert_eq!(e, DecodeError::MissingGroupHeader { at: 0 });
        assert!(e.to_string().contains("kmirror.group"), "{e}");
    }

    #[test]
    fn decode_refuses_other_control_records_and_null_keys() {
        let b = build_control_batch(0, 0, 5, 0, 2, 0, 0); // LEADER_CHANGE
        assert_eq!(
            decode(&b).unwrap_err(),
            DecodeError::UnknownControlType {
                at: 0,
                control_type: 2
            }
        );
        let spec = |attributes, producer_id| BatchSpec {
            base_offset: 0,
            partition_leader_epoch: 0,
            attributes,
            base_timestamp: 0,
            producer_id,
            producer_epoch: 0,
            base_sequence: -1,
        };
        let null_key = build_batch(&spec(0, -1), &[(None, Some(b"v"))]);
        assert!(matches!(
            decode(&null_key).unwrap_err(),
            DecodeError::MalformedRecord {
                at: 0,
                index: 0,
                ..
            }
        ));
        let no_pid = build_batch(&spec(TRANSACTIONAL_ATTRIBUTES, -1), &[(Some(b"k"), None)]);
        assert_eq!(
            decode(&no_pid).unwrap_err(),
            DecodeError::NoProducerId { at: 0 }
        );
        let two = build_batch(
            &spec(CONTROL_ATTRIBUTES, 1),
            &[(Some(&b"\0\0\0\x01"[..]), Some(&b"\0\0\0\0\0\0"[..])); 2],
        );
        assert!(matches!(
            decode(&two).unwrap_err(),
            DecodeError::NotAMarker { at: 0, .. }
        ));
    }

    #[test]
    fn batches_the_cleaner_emptied_decode_to_nothing() {
        let spec = BatchSpec {
            base_offset: 0,
            partition_leader_epoch: 0,
            attributes: CONTROL_ATTRIBUTES,
            base_timestamp: 0,
            producer_id: 5,
            producer_epoch: 0,
            base_sequence: -1,
        };
        let mut b = build_batch(&spec, &[]);
        b.extend_from_slice(&encode(&[rec(b"k", None, &[])], 0, 0).unwrap()[0].bytes);
        assert_eq!(decode(&b).unwrap(), [rec(b"k", None, &[])]);
    }

    #[test]
    fn decode_refuses_truncated_input() {
        let payloads = mixed();
        let batches = encode(&payloads, 0, 0).unwrap();
        let bytes = concat(&batches);
        let mut boundaries = vec![0];
        for b in &batches {
            boundaries.push(boundaries.last().unwrap() + b.bytes.len());
        }
        for cut in 0..bytes.len() {
            let r = decode(&bytes[..cut]);
            match boundaries.iter().position(|&b| b == cut) {
                // Whole batches: the payloads of those batches.
                Some(n) => {
                    let whole = decode(&concat(&batches[..n])).unwrap();
                    assert_eq!(r.unwrap(), whole, "cut {cut}");
                }
                None => assert!(
                    matches!(
                        r,
                        Err(DecodeError::Batch {
                            source: BatchError::Truncated { .. },
                            ..
                        })
                    ),
                    "cut {cut}: {r:?}"
                ),
            }
        }
    }

    #[test]
    fn decode_survives_every_flipped_byte_with_a_fixed_crc() {
        // Corruption past the CRC check must reach the record parser without a panic.
        let bytes = concat(&encode(&mixed(), 0, 0).unwrap());
        let mut at = 0;
        while at < bytes.len() {
            let total = validate(&bytes[at..]).unwrap().1;
            for pos in at..at + total {
                for flip in [0x01, 0x80, 0xFF] {
                    let mut b = bytes.clone();
                    b[pos] ^= flip;
                    if pos >= at + ATTRIBUTES_POS {
                        refresh_crc(&mut b[at..at + total]);
                    }
                    let _ = decode(&b);
                }
            }
            at += total;
        }
    }

    proptest! {
        #[test]
        fn decode_never_panics_on_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode(&b);
        }

        /// A valid header with an arbitrary records section (CRC fixed), so that the record
        /// parser sees the bytes.
        #[test]
        fn decode_never_panics_on_arbitrary_records(
            section in proptest::collection::vec(any::<u8>(), 0..200),
            count in -2i32..6,
            attributes in prop::sample::select(vec![0, TRANSACTIONAL_ATTRIBUTES, CONTROL_ATTRIBUTES]),
        ) {
            let mut b = build_batch(
                &BatchSpec {
                    base_offset: 0,
                    partition_leader_epoch: 0,
                    attributes,
                    base_timestamp: 0,
                    producer_id: 3,
                    producer_epoch: 0,
                    base_sequence: -1,
                },
                &[],
            );
            b.extend_from_slice(&section);
            let len = (b.len() - LOG_OVERHEAD) as i32;
            b[batch::LENGTH_POS..batch::LENGTH_POS + 4].copy_from_slice(&len.to_be_bytes());
            b[batch::RECORDS_COUNT_POS..HEADER_SIZE].copy_from_slice(&count.to_be_bytes());
            b[batch::LAST_OFFSET_DELTA_POS..batch::LAST_OFFSET_DELTA_POS + 4]
                .copy_from_slice(&(count - 1).max(0).to_be_bytes());
            refresh_crc(&mut b);
            let _ = decode(&b);
        }
    }
}
