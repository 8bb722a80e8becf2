//! Records of the transaction log (`__transaction_state-0/records.log`) in Kafka's coordinator
//! record format (see `crate::coordinator_record`):
//!
//! - TransactionLogKey (type 0: TransactionalId) / TransactionLogValue version 0, what Kafka
//!   4.1 writes for clients of transaction protocol v1 (version 1, flexible, is for
//!   transaction version 2): ProducerId, ProducerEpoch, TransactionTimeoutMs,
//!   TransactionStatus, TransactionPartitions (null while Empty),
//!   TransactionLastUpdateTimestampMs, TransactionStartTimestampMs. Version 1 is read too.
//!   The consumer groups whose offsets the transaction carries ride in a record header
//!   (`kmirror.groups`): Kafka names their `__consumer_offsets` partitions among the
//!   transaction's partitions instead, and finds the groups from the markers.
//! - kmirror's own producer-id blocks ([`Payload::ProducerIdBlock`]).
//!
//! Records of the old JSON encoding (`{"t": …}`) are still read.

use serde::Deserialize;

use super::TxnState;
use crate::coordinator_record::{self as cr, DecodeError, Payload, Reader};

const TRANSACTION_LOG: i16 = 0;
/// The header that lists the transaction's consumer groups.
const GROUPS_HEADER: &str = "kmirror.groups";
/// TransactionLogValue: version written (transaction protocol v1), flexible from.
const VALUE_VERSION: i16 = 0;
const VALUE_FLEXIBLE: i16 = 1;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "t")]
pub(super) enum TxnRec {
    /// Every producer id below `end` may have been handed out.
    PidBlock { end: i64 },
    Txn {
        id: String,
        pid: i64,
        epoch: i16,
        timeout_ms: i32,
        state: TxnState,
        partitions: Vec<(String, i32)>,
        groups: Vec<String>,
        start_ms: i64,
    },
}

/// Kafka's TransactionState ids.
fn status(s: TxnState) -> i8 {
    match s {
        TxnState::Empty => 0,
        TxnState::Ongoing => 1,
        TxnState::PrepareCommit => 2,
        TxnState::PrepareAbort => 3,
        TxnState::CompleteCommit => 4,
        TxnState::CompleteAbort => 5,
    }
}

fn state_of(b: i8) -> Result<TxnState, DecodeError> {
    Ok(match b {
        0 => TxnState::Empty,
        1 => TxnState::Ongoing,
        2 => TxnState::PrepareCommit,
        3 => TxnState::PrepareAbort,
        4 => TxnState::CompleteCommit,
        5 => TxnState::CompleteAbort,
        // Dead (6) and PrepareEpochFence (7) are states kmirror never enters.
        b => return Err(format!("transaction status {b}")),
    })
}

impl TxnRec {
    pub(super) fn encode(&self) -> Vec<u8> {
        match self {
            TxnRec::PidBlock { end } => Payload::ProducerIdBlock { end: *end }.encode(),
            TxnRec::Txn {
                id,
                pid,
                epoch,
                timeout_ms,
                state,
                partitions,
                groups,
                start_ms,
            } => {
                let key = cr::key(TRANSACTION_LOG, |w| w.string(id));
                let value = cr::value(VALUE_VERSION, VALUE_FLEXIBLE, |w| {
                    w.i64(*pid);
                    w.i16(*epoch);
                    w.i32(*timeout_ms);
                    w.i8(status(*state));
                    if *state == TxnState::Empty && partitions.is_empty() {
                        w.i32(-1);
                    } else {
                        let topics = by_topic(partitions);
                        w.array_len(topics.len());
                        for (topic, ids) in topics {
                            w.string(topic);
                            w.array_len(ids.len());
                            for p in ids {
                                w.i32(p);
                            }
                        }
                    }
                    // kmirror does not expire transactional ids, so it keeps no last-update
                    // time of its own.
                    w.i64(-1);
                    w.i64(*start_ms);
                });
                let mut headers = Vec::new();
                if !groups.is_empty() {
                    let names = cr::classic(|w| {
                        w.array_len(groups.len());
                        for g in groups {
                            w.string(g);
                        }
                    });
                    headers.push((GROUPS_HEADER.to_string(), names));
                }
                Payload::Record {
                    key,
                    value: Some(value),
                    headers,
                }
                .encode()
            }
        }
    }

    pub(super) fn decode(bytes: &[u8]) -> Result<TxnRec, DecodeError> {
        if cr::is_legacy_json(bytes) {
            return serde_json::from_slice(bytes).map_err(|e| e.to_string());
        }
        let (key, value, headers) = match Payload::decode(bytes)? {
            Payload::ProducerIdBlock { end } => return Ok(TxnRec::PidBlock { end }),
            Payload::Record {
                key,
                value,
                headers,
            } => (key, value, headers),
            p => return Err(format!("not a transaction log record: {p:?}")),
        };
        let (record_type, mut k) = Reader::key(&key)?;
        if record_type != TRANSACTION_LOG {
            return Err(format!("record type {record_type} in the transaction log"));
        }
        let id = k.string()?;
        k.end()?;
        // Kafka's tombstone of an expired transactional id; kmirror never writes one.
        let value = value.ok_or_else(|| format!("tombstone for transactional id {id}"))?;
        let (_, mut r) = Reader::value(&value, 0..=1, VALUE_FLEXIBLE)?;
        let pid = r.i64()?;
        let epoch = r.i16()?;
        let timeout_ms = r.i32()?;
        let state = state_of(r.i8()?)?;
        let mut partitions = Vec::new();
        for _ in 0..r.array_len()? {
            let topic = r.string()?;
            for _ in 0..r.array_len()? {
                partitions.push((topic.clone(), r.i32()?));
            }
            r.tagged_fields(|_, _| Ok(()))?;
        }
        let _last_update_ms = r.i64()?;
        let start_ms = r.i64()?;
        r.tagged_fields(|_, _| Ok(()))?;
        r.end()?;
        let mut groups = Vec::new();
        for (name, v) in headers {
            if name == GROUPS_HEADER {
                let mut h = Reader::classic(&v);
                for _ in 0..h.array_len()? {
                    groups.push(h.string()?);
                }
                h.end()?;
            }
        }
        Ok(TxnRec::Txn {
            id,
            pid,
            epoch,
            timeout_ms,
            state,
            partitions,
            groups,
            start_ms,
        })
    }
}

/// Partitions grouped by topic, in the order given (Kafka's PartitionsSchema).
fn by_topic(partitions: &[(String, i32)]) -> Vec<(&str, Vec<i32>)> {
    let mut out: Vec<(&str, Vec<i32>)> = Vec::new();
    for (topic, p) in partitions {
        match out.last_mut() {
            Some((t, ps)) if t == topic => ps.push(*p),
            _ => out.push((topic, vec![*p])),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s16(s: &str) -> Vec<u8> {
        let mut v = (s.len() as i16).to_be_bytes().to_vec();
        v.extend_from_slice(s.as_bytes());
        v
    }

    fn txn(state: TxnState, partitions: &[(&str, i32)], groups: &[&str]) -> TxnRec {
        TxnRec::Txn {
            id: "tx".into(),
            pid: 7,
            epoch: 2,
            timeout_ms: 60_000,
            state,
            partitions: partitions
                .iter()
                .map(|(t, p)| (t.to_string(), *p))
                .collect(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            start_ms: 1_000,
        }
    }

    #[test]
    fn a_transaction_is_transaction_log_key_0_and_value_version_0_field_by_field() {
        let rec = txn(
            TxnState::Ongoing,
            &[("a", 0), ("a", 2), ("b", 1)],
            &["g1", "g2"],
        );
        let Payload::Record {
            key,
            value,
            headers,
        } = Payload::decode(&rec.encode()).unwrap()
        else {
            panic!("not a record");
        };
        assert_eq!(key, [&0i16.to_be_bytes()[..], &s16("tx")].concat());
        let expected = [
            &0i16.to_be_bytes()[..],
            &7i64.to_be_bytes(),
            &2i16.to_be_bytes(),
            &60_000i32.to_be_bytes(),
            &[1],
            // TransactionPartitions: [a: 0, 2], [b: 1].
            &2i32.to_be_bytes(),
            &s16("a"),
            &2i32.to_be_bytes(),
            &0i32.to_be_bytes(),
            &2i32.to_be_bytes(),
            &s16("b"),
            &1i32.to_be_bytes(),
            &1i32.to_be_bytes(),
            &(-1i64).to_be_bytes(),
            &1_000i64.to_be_bytes(),
        ]
        .concat();
        assert_eq!(value.unwrap(), expected);
        let groups = [&2i32.to_be_bytes()[..], &s16("g1"), &s16("g2")].concat();
        assert_eq!(headers, vec![(GROUPS_HEADER.to_string(), groups)]);
        assert_eq!(TxnRec::decode(&rec.encode()).unwrap(), rec);
    }

    /// As Kafka 4.1.1's generated TransactionLogKey / TransactionLogValue write them (hex).
    #[test]
    fn bytes_equal_what_kafkas_own_generated_classes_write() {
        let rec = txn(TxnState::Ongoing, &[("a", 0), ("a", 2), ("b", 1)], &[]);
        let Payload::Record { key, value, .. } = Payload::decode(&rec.encode()).unwrap() else {
            panic!("not a record");
        };
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert_eq!(hex(&key), "000000027478");
        assert_eq!(
            hex(&value.unwrap()),
            "0000000000000000000700020000ea600100000002000161000000020000000000000002000162\
             0000000100000001ffffffffffffffff00000000000003e8"
        );
    }

    #[test]
    fn an_empty_transaction_has_null_partitions_and_no_header() {
        let rec = txn(TxnState::Empty, &[], &[]);
        let Payload::Record { value, headers, .. } = Payload::decode(&rec.encode()).unwrap() else {
            panic!("not a record");
        };
        let value = value.unwrap();
        // version, pid, epoch, timeout, status, then the null array.
        assert_eq!(&value[2 + 8 + 2 + 4 + 1..][..4], (-1i32).to_be_bytes());
        assert!(headers.is_empty());
        assert_eq!(TxnRec::decode(&rec.encode()).unwrap(), rec);
        for state in [
            TxnState::PrepareCommit,
            TxnState::PrepareAbort,
            TxnState::CompleteCommit,
            TxnState::CompleteAbort,
        ] {
            let rec = txn(state, &[("t", 0)], &["g"]);
            assert_eq!(TxnRec::decode(&rec.encode()).unwrap(), rec);
        }
    }

    #[test]
    fn a_flexible_version_1_value_as_transaction_version_2_writes_is_read() {
        let key = [&0i16.to_be_bytes()[..], &s16("tx")].concat();
        let value = [
            &1i16.to_be_bytes()[..],
            &7i64.to_be_bytes(),
            &2i16.to_be_bytes(),
            &60_000i32.to_be_bytes(),
            &[4],
            // Compact array of one topic "t" with partition 3, its tags.
            &[2, 2, b't', 2],
            &3i32.to_be_bytes(),
            &[0],
            &5i64.to_be_bytes(),
            &1_000i64.to_be_bytes(),
            // ClientTransactionVersion (tag 2) = 2.
            &[1, 2, 2, 0, 2],
        ]
        .concat();
        let p = Payload::record(key, Some(value));
        assert_eq!(
            TxnRec::decode(&p.encode()).unwrap(),
            txn(TxnState::CompleteCommit, &[("t", 3)], &[])
        );
    }

    #[test]
    fn producer_id_blocks_and_old_json_records_are_read() {
        let block = TxnRec::PidBlock { end: 2000 };
        assert_eq!(TxnRec::decode(&block.encode()).unwrap(), block);
        assert_eq!(
            TxnRec::decode(br#"{"t":"PidBlock","end":1000}"#).unwrap(),
            TxnRec::PidBlock { end: 1000 }
        );
        let json = br#"{"t":"Txn","id":"tx","pid":7,"epoch":2,"timeout_ms":60000,"state":"Ongoing","partitions":[["a",0],["a",2],["b",1]],"groups":["g1","g2"],"start_ms":1000}"#;
        assert_eq!(
            TxnRec::decode(json).unwrap(),
            txn(
                TxnState::Ongoing,
                &[("a", 0), ("a", 2), ("b", 1)],
                &["g1", "g2"]
            )
        );
    }
}
