//! `kmirror mirror verify`: an online check that a mirror holds the source's batches, byte
//! for byte, at the same offsets, without pausing anything.
//!
//! For each partition it walks the mirror's log from its log start up to its last stable
//! offset as read when the partition's check starts, fetching from the mirror and from the
//! source as a consumer would (read_committed). Every mirror batch is re-checksummed
//! (CRC32C over attributes..end, as Kafka's producer computed it) rather than trusting its
//! stored header, and its (base offset, last offset, length, CRC) must equal the source
//! batch at the same offset. The answer per partition is "equal up to offset N" or the
//! first difference. Kafka's Fetch has no header-only mode, so the source's batches are
//! read whole: verifying costs one read of the mirrored range on each side, and no write.

use std::time::Duration;

use bytes::Bytes;
use kmirror_log::batch::{self, BatchHeader, BatchIter};
use kmirror_types::{LeaderEpoch, Offset, TopicPartition};

use crate::client::build;
use crate::client::security::ClientSecurity;
use crate::fetcher::{
    BlockingSource, FetchOutcome, FetcherConfig, Source, SourceError, SourceLeader,
};
use crate::keys::error as code;

/// One partition's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every batch below `upto` is the source's (`batches` compared, from `from`).
    Equal { from: i64, upto: i64, batches: u64 },
    /// The first batch that differs, at `offset`, and how.
    Differs { offset: i64, what: String },
}

/// A partition and its verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyRow {
    pub tp: TopicPartition,
    pub verdict: Verdict,
}

/// Bytes asked per fetch on each side.
const CHUNK: i32 = 4 * 1024 * 1024;

/// Verifies `parts` of the mirror at `dest_bootstrap` against `source_bootstrap`.
pub fn verify_partitions(
    dest_bootstrap: &str,
    dest_security: &ClientSecurity,
    source_bootstrap: &str,
    source_security: &ClientSecurity,
    parts: &[TopicPartition],
    timeout: Duration,
) -> Result<Vec<VerifyRow>, SourceError> {
    use futures_lite::future::block_on;
    let mut dst = BlockingSource::over(dest_bootstrap, "kmirror-cli-verify".into(), timeout)
        .with_security(Ok(dest_security.clone()));
    let mut src = BlockingSource::over(source_bootstrap, "kmirror-cli-verify".into(), timeout)
        .with_security(Ok(source_security.clone()));
    parts
        .iter()
        .map(|tp| {
            block_on(verify_one(&mut dst, &mut src, tp)).map(|verdict| VerifyRow {
                tp: tp.clone(),
                verdict,
            })
        })
        .collect()
}

/// The last stable offset (ListOffsets LATEST, read_committed, on each partition's leader)
/// of `parts` on the cluster at `bootstrap`: what `switchover` compares over its quiet period
/// and against where the failover stopped.
pub fn last_stable_offsets(
    bootstrap: &str,
    security: &ClientSecurity,
    parts: &[TopicPartition],
    timeout: Duration,
) -> Result<Vec<(TopicPartition, i64)>, SourceError> {
    use futures_lite::future::block_on;
    let mut c = BlockingSource::over(bootstrap, "kmirror-cli-switchover".into(), timeout)
        .with_security(Ok(security.clone()));
    parts
        .iter()
        .map(|tp| {
            block_on(async {
                let leader = c.leader(&tp.topic, tp.partition).await?;
                match c
                    .list_offset(
                        &leader,
                        &tp.topic,
                        tp.partition,
                        LeaderEpoch::UNKNOWN,
                        build::LATEST,
                    )
                    .await?
                {
                    Ok(o) => Ok((tp.clone(), o.get())),
                    Err(e) => Err(SourceError::Other(format!(
                        "ListOffsets {tp} on {bootstrap}: {}",
                        code::name(e.code())
                    ))),
                }
            })
        })
        .collect()
}

async fn verify_one<S: Source>(
    dst: &mut S,
    src: &mut S,
    tp: &TopicPartition,
) -> Result<Verdict, SourceError> {
    let (t, p) = (tp.topic.as_str(), tp.partition);
    let dst_leader = dst.leader(t, p).await?;
    let src_leader = src.leader(t, p).await?;
    let bound = |r: Result<Result<Offset, kmirror_types::ErrorCode>, SourceError>,
                 side: &str|
     -> Result<i64, SourceError> {
        match r? {
            Ok(o) => Ok(o.get()),
            Err(c) => Err(SourceError::Other(format!(
                "ListOffsets {tp} on the {side}: {}",
                code::name(c.code())
            ))),
        }
    };
    let from = bound(
        dst.list_offset(&dst_leader, t, p, LeaderEpoch::UNKNOWN, build::EARLIEST)
            .await,
        "mirror",
    )?;
    let upto = bound(
        dst.list_offset(&dst_leader, t, p, LeaderEpoch::UNKNOWN, build::LATEST)
            .await,
        "mirror",
    )?;
    let mut offset = from;
    let mut batches = 0u64;
    // The source's batches not yet compared, from the last source fetch.
    let mut pending: Bytes = Bytes::new();
    while offset < upto {
        let mine = fetch(dst, &dst_leader, tp, offset, "mirror").await?;
        let Some(mine) = batch::whole_batches(&mine) else {
            return Ok(Verdict::Differs {
                offset,
                what: "the mirror returned no whole batch here".to_owned(),
            });
        };
        for item in BatchIter::headers(&mine.bytes) {
            let Ok((h, start, end)) = item else {
                return Ok(Verdict::Differs {
                    offset,
                    what: "the mirror's batch framing is broken".to_owned(),
                });
            };
            if h.base_offset() >= upto {
                break;
            }
            let stored = &mine.bytes[start..end];
            if let Err(e) = batch::validate(stored) {
                return Ok(Verdict::Differs {
                    offset: h.base_offset(),
                    what: format!("the mirror's stored batch fails its check ({e})"),
                });
            }
            if pending.is_empty() {
                let theirs = fetch(src, &src_leader, tp, h.base_offset(), "source").await?;
                pending = batch::whole_batches(&theirs).map_or_else(Bytes::new, |w| w.bytes);
            }
            let Ok(s) = BatchHeader::parse(&pending) else {
                return Ok(Verdict::Differs {
                    offset: h.base_offset(),
                    what: "the source has no batch at this offset (deleted by retention?)"
                        .to_owned(),
                });
            };
            let size = s.total_size();
            if let Some(what) = header_difference(&h, &s) {
                return Ok(Verdict::Differs {
                    offset: h.base_offset(),
                    what,
                });
            }
            pending = pending.slice(size.min(pending.len())..);
            batches += 1;
            offset = h.last_offset() + 1;
        }
    }
    Ok(Verdict::Equal {
        from,
        upto,
        batches,
    })
}

/// How the mirror's batch `m` differs from the source's `s`, if it does.
fn header_difference(m: &BatchHeader<'_>, s: &BatchHeader<'_>) -> Option<String> {
    let mine = (m.base_offset(), m.last_offset(), m.total_size(), m.crc());
    let theirs = (s.base_offset(), s.last_offset(), s.total_size(), s.crc());
    (mine != theirs).then(|| {
        format!(
            "mirror batch (offsets {}..={}, {} bytes, crc {:08x}) != source batch (offsets {}..={}, {} bytes, crc {:08x})",
            mine.0, mine.1, mine.2, mine.3, theirs.0, theirs.1, theirs.2, theirs.3
        )
    })
}

async fn fetch<S: Source>(
    side: &mut S,
    leader: &SourceLeader,
    tp: &TopicPartition,
    offset: i64,
    name: &str,
) -> Result<Bytes, SourceError> {
    let part = build::FetchPart {
        topic: tp.topic.clone(),
        // Fetch v13+ names topics by id, which Metadata gave with the leader.
        topic_id: leader.topic_id,
        partition: tp.partition,
        fetch_offset: Offset(offset),
        current_leader_epoch: LeaderEpoch::UNKNOWN,
        partition_max_bytes: CHUNK,
    };
    let cfg = FetcherConfig {
        max_wait_ms: 0,
        max_bytes: CHUNK,
        partition_max_bytes: CHUNK,
        ..FetcherConfig::default()
    };
    match side.fetch(leader, &part, &cfg).await? {
        FetchOutcome::Records(r) => Ok(r.records),
        FetchOutcome::Refused { error, .. } => Err(SourceError::Other(format!(
            "Fetch {tp} at {offset} on the {name}: {}",
            code::name(error.code())
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_log::batch::{build_batch, BatchSpec};

    fn batch_at(base: i64, values: &[&[u8]]) -> Vec<u8> {
        let spec = BatchSpec {
            base_offset: base,
            partition_leader_epoch: 0,
            attributes: 0,
            base_timestamp: 1_700_000_000_000,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
        };
        let records: Vec<kmirror_log::batch::KeyValue<'_>> =
            values.iter().map(|v| (None, Some(*v))).collect();
        build_batch(&spec, &records)
    }

    #[test]
    fn a_batch_differing_in_offsets_or_payload_is_named() {
        let a = batch_at(10, &[b"x", b"y"]);
        let b = batch_at(10, &[b"x", b"z"]);
        let c = batch_at(11, &[b"x", b"y"]);
        fn h(v: &[u8]) -> BatchHeader<'_> {
            BatchHeader::parse(v).unwrap()
        }
        assert_eq!(header_difference(&h(&a), &h(&a)), None);
        assert!(header_difference(&h(&a), &h(&b)).unwrap().contains("crc"));
        assert!(header_difference(&h(&a), &h(&c)).is_some());
        // A stored payload byte flipped: the batch fails its own CRC.
        let mut bad = a.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        assert!(batch::validate(&bad).is_err());
    }
}
