//! Fetch responses written without copying record data.
//!
//! kafka-protocol encodes a response into one buffer, copying every record batch. For the
//! hot Fetch path we let it encode each partition's small fields and splice the record
//! bytes (zero-copy slices of the log's mmap) in as separate chunks, written to the socket
//! one after another. The wire bytes are identical to kafka-protocol's (tested below).
//! A spliced chunk also carries where it lies in its segment file ([`FileRegion`]), so plain
//! TCP connections send it with sendfile(2) instead of copying it out of the mapping.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{ApiKey, FetchResponse, ResponseHeader};
use kafka_protocol::protocol::Encodable;
use kmirror_log::FileRegion;

/// Records shorter than this are copied into the surrounding chunk (a separate send costs
/// more than the copy).
const SPLICE_MIN: usize = 16 << 10;

/// A response frame as chunks to write in order; some chunks are also file regions.
#[derive(Debug, Default)]
pub(crate) struct Frames {
    pub chunks: Vec<Bytes>,
    /// (index into `chunks`, the file bytes equal to that chunk), increasing.
    pub files: Vec<(usize, FileRegion)>,
}

impl Frames {
    /// One chunk, no file.
    pub(crate) fn one(b: Bytes) -> Frames {
        Frames {
            chunks: vec![b],
            files: Vec::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }
}

struct Chunks {
    out: Vec<Bytes>,
    files: Vec<(usize, FileRegion)>,
    cur: BytesMut,
}

impl Chunks {
    fn splice(&mut self, b: Bytes, file: Option<&FileRegion>) {
        if b.len() < SPLICE_MIN {
            self.cur.put_slice(&b);
        } else {
            if !self.cur.is_empty() {
                self.out.push(self.cur.split().freeze());
            }
            if let Some(f) = file {
                self.files.push((self.out.len(), f.clone()));
            }
            self.out.push(b);
        }
    }
}

fn put_uvarint(b: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        b.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    b.put_u8(v as u8);
}

fn put_array_len(b: &mut BytesMut, n: usize, flexible: bool) {
    if flexible {
        put_uvarint(b, n as u32 + 1);
    } else {
        b.put_i32(n as i32);
    }
}

fn put_string(b: &mut BytesMut, s: &str, flexible: bool) {
    if flexible {
        put_uvarint(b, s.len() as u32 + 1);
    } else {
        b.put_i16(s.len() as i16);
    }
    b.put_slice(s.as_bytes());
}

/// Encodes one partition, splicing its records. Returns false (nothing written) when the
/// partition carries tagged fields whose position we do not model; the caller then falls
/// back to the plain encoder.
fn put_partition(
    c: &mut Chunks,
    p: &PartitionData,
    file: Option<&FileRegion>,
    version: i16,
) -> Result<bool, String> {
    let flexible = version >= 12;
    if flexible
        && (p.diverging_epoch != Default::default()
            || p.current_leader != Default::default()
            || p.snapshot_id != Default::default()
            || !p.unknown_tagged_fields.is_empty())
    {
        return Ok(false);
    }
    let mut meta = p.clone();
    let records = meta.records.take();
    meta.records = Some(Bytes::new());
    let mut tmp = BytesMut::new();
    meta.encode(&mut tmp, version).map_err(|e| e.to_string())?;
    // Layout: fields…, records length (int32 0, or uvarint 1 when flexible), then (flexible)
    // the empty tagged-field count 0.
    let tail = if flexible { 2 } else { 4 };
    let fields = tmp.len() - tail;
    c.cur.put_slice(&tmp[..fields]);
    match records {
        None => {
            if flexible {
                put_uvarint(&mut c.cur, 0);
            } else {
                c.cur.put_i32(-1);
            }
        }
        Some(r) => {
            if flexible {
                put_uvarint(&mut c.cur, r.len() as u32 + 1);
            } else {
                c.cur.put_i32(r.len() as i32);
            }
            c.splice(r, file);
        }
    }
    if flexible {
        c.cur.put_u8(0);
    }
    Ok(true)
}

/// The whole response frame (length prefix and header included) as chunks to write in order.
/// `files[i]`, when present, is where the records of the i-th partition (in response order)
/// lie on disk.
pub(crate) fn encode_fetch_response(
    resp: &FetchResponse,
    version: i16,
    correlation_id: i32,
    files: &[Option<FileRegion>],
) -> Result<Frames, String> {
    let flexible = version >= 12;
    if !resp.unknown_tagged_fields.is_empty() || !resp.node_endpoints.is_empty() {
        return plain(resp, version, correlation_id);
    }
    let mut c = Chunks {
        out: Vec::new(),
        files: Vec::new(),
        cur: BytesMut::with_capacity(1024),
    };
    let mut nth = 0usize;
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut c.cur, ApiKey::Fetch.response_header_version(version))
        .map_err(|e| e.to_string())?;
    c.cur.put_i32(resp.throttle_time_ms);
    if version >= 7 {
        c.cur.put_i16(resp.error_code);
        c.cur.put_i32(resp.session_id);
    }
    put_array_len(&mut c.cur, resp.responses.len(), flexible);
    for t in &resp.responses {
        if !t.unknown_tagged_fields.is_empty() {
            return plain(resp, version, correlation_id);
        }
        if version <= 12 {
            put_string(&mut c.cur, t.topic.as_str(), flexible);
        }
        if version >= 13 {
            c.cur.put_slice(t.topic_id.as_bytes());
        }
        put_array_len(&mut c.cur, t.partitions.len(), flexible);
        for p in &t.partitions {
            let file = files.get(nth).and_then(Option::as_ref);
            nth += 1;
            if !put_partition(&mut c, p, file, version)? {
                return plain(resp, version, correlation_id);
            }
        }
        if flexible {
            c.cur.put_u8(0);
        }
    }
    if flexible {
        c.cur.put_u8(0);
    }
    if !c.cur.is_empty() {
        c.out.push(c.cur.split().freeze());
    }
    let total: usize = c.out.iter().map(Bytes::len).sum();
    // Prefix the length; merge it with the first chunk when that one is small metadata.
    let mut head = BytesMut::with_capacity(4 + c.out[0].len().min(SPLICE_MIN));
    head.put_i32(total as i32);
    if c.out[0].len() < SPLICE_MIN {
        head.put_slice(&c.out[0]);
        c.out[0] = head.freeze();
    } else {
        c.out.insert(0, head.freeze());
        for (i, _) in &mut c.files {
            *i += 1;
        }
    }
    Ok(Frames {
        chunks: c.out,
        files: c.files,
    })
}

fn plain(resp: &FetchResponse, version: i16, correlation_id: i32) -> Result<Frames, String> {
    let mut b = BytesMut::new();
    b.put_i32(0);
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut b, ApiKey::Fetch.response_header_version(version))
        .map_err(|e| e.to_string())?;
    resp.encode(&mut b, version).map_err(|e| e.to_string())?;
    let len = (b.len() - 4) as i32;
    b[..4].copy_from_slice(&len.to_be_bytes());
    Ok(Frames::one(b.freeze()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_response::*;
    use kafka_protocol::messages::{ProducerId, TopicName};
    use kafka_protocol::protocol::StrBytes;

    fn sample() -> FetchResponse {
        let big = Bytes::from(vec![7u8; 100_000]);
        let small = Bytes::from_static(b"tiny batch bytes");
        let part = |i: i32, r: Option<Bytes>| {
            PartitionData::default()
                .with_partition_index(i)
                .with_high_watermark(1000 + i as i64)
                .with_last_stable_offset(900)
                .with_log_start_offset(5)
                .with_aborted_transactions(Some(vec![AbortedTransaction::default()
                    .with_producer_id(ProducerId(42))
                    .with_first_offset(17)]))
                .with_records(r)
        };
        FetchResponse::default().with_responses(vec![
            FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_static_str("orders")))
                .with_topic_id(uuid::Uuid::from_u128(0x1234))
                .with_partitions(vec![
                    part(0, Some(big.clone())),
                    part(1, Some(small)),
                    part(2, Some(Bytes::new())),
                    part(3, Some(big)),
                ]),
            FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_static_str("t2")))
                .with_topic_id(uuid::Uuid::from_u128(0x99))
                .with_partitions(vec![part(0, None).with_error_code(1)]),
        ])
    }

    #[test]
    fn spliced_fetch_responses_are_byte_identical_to_the_plain_encoding_for_every_version() {
        for version in 4..=18 {
            let mut resp = sample();
            if version < 11 {
                for t in &mut resp.responses {
                    for p in &mut t.partitions {
                        p.preferred_read_replica = (-1).into();
                    }
                }
            }
            if version < 7 {
                resp.session_id = 0;
            }
            let chunks = encode_fetch_response(&resp, version, 77, &[])
                .unwrap()
                .chunks;
            let joined: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
            let plain = plain(&resp, version, 77).unwrap().chunks.concat();
            assert_eq!(joined, plain, "version {version}");
            // The big record sets travel as their own chunks (no copy).
            assert!(
                chunks.iter().filter(|c| c.len() == 100_000).count() == 2,
                "version {version}"
            );
        }
    }

    #[test]
    fn file_regions_point_at_the_chunks_of_their_partitions_records() {
        let file = std::sync::Arc::new(tempfile::tempfile().unwrap());
        let region = |position| {
            Some(FileRegion {
                file: file.clone(),
                position,
            })
        };
        let resp = sample();
        // Partitions in response order: big, small, empty, big, (t2) none.
        let files = [region(10), region(20), None, region(30), None];
        for version in [11, 12, 16] {
            let frames = encode_fetch_response(&resp, version, 5, &files).unwrap();
            let at: Vec<(usize, u64)> =
                frames.files.iter().map(|(i, f)| (*i, f.position)).collect();
            // Only the spliced (big) record sets carry their region; the small one is copied.
            assert_eq!(at.len(), 2, "version {version}");
            assert_eq!(at[0].1, 10);
            assert_eq!(at[1].1, 30);
            for (i, _) in &at {
                assert_eq!(frames.chunks[*i].len(), 100_000, "version {version}");
            }
        }
    }

    #[test]
    fn tagged_partition_fields_fall_back_to_the_plain_encoder() {
        let mut resp = sample();
        resp.responses[0].partitions[0].current_leader = LeaderIdAndEpoch::default()
            .with_leader_id(1.into())
            .with_leader_epoch(3);
        let chunks = encode_fetch_response(&resp, 16, 1, &[]).unwrap().chunks;
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0], plain(&resp, 16, 1).unwrap().chunks[0]);
    }
}
