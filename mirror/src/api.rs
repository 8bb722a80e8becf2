//! Wire types of the Cluster Mirroring APIs (KIP-1279), with our own flexible-version codec.
//!
//! kafka-protocol (Kafka 4.1 schemas) knows none of these APIs, so each message here is a plain
//! struct whose fields follow the upstream prototype's schema (see [`crate::keys`] for where
//! the numbers come from) and which encodes/decodes itself with a small codec for the
//! "flexible" encoding: compact strings and arrays, unsigned varints, UUIDs and tagged-field
//! sections. Every struct keeps the tagged fields it does not know, so a message decoded from a
//! newer peer re-encodes byte-identically.
//!
//! kmirror's own additions travel only in tagged fields numbered from [`KMIRROR_TAG_BASE`], so
//! an upstream client ignores them and upstream's future tags (which count up from 0) cannot
//! collide with them.
//!
//! Every message also implements kafka-protocol's `Encodable`/`Decodable` (the same bytes),
//! requests its `Request` and responses its `Message`/`HeaderVersion`, so generic code encodes
//! them like any other API. Requests implement [`MirrorRequest`] (key, name, response type). The request header is
//! read and written by hand ([`read_request_header_v2`]) because kafka-protocol's `ApiKey`
//! rejects keys >= 94. Invariant: only version 0 exists for every mirror API.

use std::collections::BTreeMap;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use uuid::Uuid;

use crate::keys::api;

/// First tag number of kmirror's extension fields.
pub const KMIRROR_TAG_BASE: i32 = 10_000;

/// Decoding failure.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("message truncated: needed {needed} more bytes")]
    Truncated { needed: usize },
    #[error("invalid varint")]
    BadVarint,
    #[error("invalid UTF-8 in string field")]
    BadUtf8,
    #[error("null where a non-nullable {0} was expected")]
    UnexpectedNull(&'static str),
    #[error("unsupported version {version} of {api} (only 0 is defined)")]
    UnsupportedVersion { api: &'static str, version: i16 },
}

/// A value with a flexible-version wire form.
pub trait Wire: Sized {
    fn write(&self, w: &mut BytesMut);
    fn read(r: &mut Bytes) -> Result<Self, CodecError>;
}

fn need(r: &Bytes, n: usize) -> Result<(), CodecError> {
    if r.remaining() < n {
        Err(CodecError::Truncated {
            needed: n - r.remaining(),
        })
    } else {
        Ok(())
    }
}

/// Unsigned LEB128 varint, as Kafka uses for compact lengths and tags.
pub fn put_uvarint(w: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        w.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    w.put_u8(v as u8);
}

pub fn get_uvarint(r: &mut Bytes) -> Result<u32, CodecError> {
    let mut v: u32 = 0;
    for i in 0..5 {
        need(r, 1)?;
        let b = r.get_u8();
        v |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(CodecError::BadVarint)
}

macro_rules! fixed_wire {
    ($t:ty, $n:expr, $put:ident, $get:ident) => {
        impl Wire for $t {
            fn write(&self, w: &mut BytesMut) {
                w.$put(*self);
            }
            fn read(r: &mut Bytes) -> Result<Self, CodecError> {
                need(r, $n)?;
                Ok(r.$get())
            }
        }
    };
}
fixed_wire!(i8, 1, put_i8, get_i8);
fixed_wire!(i16, 2, put_i16, get_i16);
fixed_wire!(i32, 4, put_i32, get_i32);
fixed_wire!(i64, 8, put_i64, get_i64);

impl Wire for bool {
    fn write(&self, w: &mut BytesMut) {
        w.put_u8(u8::from(*self));
    }
    fn read(r: &mut Bytes) -> Result<Self, CodecError> {
        need(r, 1)?;
        Ok(r.get_u8() != 0)
    }
}

impl Wire for Uuid {
    fn write(&self, w: &mut BytesMut) {
        w.put_slice(self.as_bytes());
    }
    fn read(r: &mut Bytes) -> Result<Self, CodecError> {
        need(r, 16)?;
        let mut b = [0u8; 16];
        r.copy_to_slice(&mut b);
        Ok(Uuid::from_bytes(b))
    }
}

/// Compact nullable string: length + 1 as uvarint, 0 = null.
impl Wire for Option<String> {
    fn write(&self, w: &mut BytesMut) {
        match self {
            None => put_uvarint(w, 0),
            Some(s) => {
                put_uvarint(w, s.len() as u32 + 1);
                w.put_slice(s.as_bytes());
            }
        }
    }
    fn read(r: &mut Bytes) -> Result<Self, CodecError> {
        let n = get_uvarint(r)? as usize;
        if n == 0 {
            return Ok(None);
        }
        need(r, n - 1)?;
        let b = r.split_to(n - 1);
        String::from_utf8(b.to_vec())
            .map(Some)
            .map_err(|_| CodecError::BadUtf8)
    }
}

impl Wire for String {
    fn write(&self, w: &mut BytesMut) {
        put_uvarint(w, self.len() as u32 + 1);
        w.put_slice(self.as_bytes());
    }
    fn read(r: &mut Bytes) -> Result<Self, CodecError> {
        <Option<String>>::read(r)?.ok_or(CodecError::UnexpectedNull("string"))
    }
}

/// Compact array: length + 1 as uvarint (null arrays are not used by these schemas; a null
/// decodes as empty).
impl<T: Wire> Wire for Vec<T> {
    fn write(&self, w: &mut BytesMut) {
        put_uvarint(w, self.len() as u32 + 1);
        for x in self {
            x.write(w);
        }
    }
    fn read(r: &mut Bytes) -> Result<Self, CodecError> {
        let n = get_uvarint(r)? as usize;
        if n == 0 {
            return Ok(Vec::new());
        }
        // Every element takes at least one byte: refuse absurd lengths before allocating.
        need(r, n - 1)?;
        (0..n - 1).map(|_| T::read(r)).collect()
    }
}

fn write_tagged(w: &mut BytesMut, known: Vec<(i32, BytesMut)>, unknown: &BTreeMap<i32, Bytes>) {
    let mut all: BTreeMap<i32, &[u8]> = unknown.iter().map(|(k, v)| (*k, &v[..])).collect();
    for (k, v) in &known {
        all.insert(*k, &v[..]);
    }
    put_uvarint(w, all.len() as u32);
    for (k, v) in all {
        put_uvarint(w, k as u32);
        put_uvarint(w, v.len() as u32);
        w.put_slice(v);
    }
}

fn read_tagged(r: &mut Bytes) -> Result<BTreeMap<i32, Bytes>, CodecError> {
    let n = get_uvarint(r)?;
    let mut out = BTreeMap::new();
    for _ in 0..n {
        let tag = get_uvarint(r)? as i32;
        let len = get_uvarint(r)? as usize;
        need(r, len)?;
        out.insert(tag, r.split_to(len));
    }
    Ok(out)
}

/// kafka-protocol's `Encodable`/`Decodable` for a [`Wire`] type, so a mirror message is
/// encoded through the same traits as every other API (e.g. by a generic client). The bytes
/// are exactly those of [`Wire`]; only version 0 exists.
macro_rules! kafka_codec {
    ($name:ty) => {
        impl kafka_protocol::protocol::Encodable for $name {
            fn encode<B: kafka_protocol::protocol::buf::ByteBufMut>(
                &self,
                buf: &mut B,
                version: i16,
            ) -> anyhow::Result<()> {
                check_version(stringify!($name), version)?;
                buf.put_slice(&encode_body(self));
                Ok(())
            }

            fn compute_size(&self, version: i16) -> anyhow::Result<usize> {
                check_version(stringify!($name), version)?;
                Ok(encode_body(self).len())
            }
        }

        impl kafka_protocol::protocol::Decodable for $name {
            fn decode<B: kafka_protocol::protocol::buf::ByteBuf>(
                buf: &mut B,
                version: i16,
            ) -> anyhow::Result<Self> {
                check_version(stringify!($name), version)?;
                // Decode from a cheap view, then consume exactly what the message used.
                let all = buf.peek_bytes(0..buf.remaining());
                let mut r = all.clone();
                let msg = <Self as Wire>::read(&mut r)?;
                buf.advance(all.len() - r.remaining());
                Ok(msg)
            }
        }
    };
}

fn check_version(api: &'static str, version: i16) -> Result<(), CodecError> {
    if version == 0 {
        Ok(())
    } else {
        Err(CodecError::UnsupportedVersion { api, version })
    }
}

/// Declares a flexible struct: regular fields in wire order, then optional tagged fields
/// `name: Type = default => tag` (written only when different from their default).
macro_rules! wire_struct {
    (
        $(#[$m:meta])*
        pub struct $name:ident {
            $( $(#[$fm:meta])* $f:ident : $t:ty ),* $(,)?
        }
        $( tagged { $( $(#[$tm:meta])* $tf:ident : $tt:ty = $td:expr => $tag:expr ),* $(,)? } )?
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct $name {
            $( $(#[$fm])* pub $f: $t, )*
            $( $( $(#[$tm])* pub $tf: $tt, )* )?
            /// Tagged fields this version of kmirror does not know, kept for re-encoding.
            pub unknown_tagged_fields: BTreeMap<i32, Bytes>,
        }

        impl Default for $name {
            fn default() -> Self {
                Self {
                    $( $f: Default::default(), )*
                    $( $( $tf: $td, )* )?
                    unknown_tagged_fields: BTreeMap::new(),
                }
            }
        }

        impl Wire for $name {
            fn write(&self, w: &mut BytesMut) {
                $( self.$f.write(w); )*
                #[allow(unused_mut)]
                let mut known: Vec<(i32, BytesMut)> = Vec::new();
                $( $(
                    let default: $tt = $td;
                    if self.$tf != default {
                        let mut b = BytesMut::new();
                        self.$tf.write(&mut b);
                        known.push(($tag, b));
                    }
                )* )?
                write_tagged(w, known, &self.unknown_tagged_fields);
            }

            fn read(r: &mut Bytes) -> Result<Self, CodecError> {
                $( let $f = <$t as Wire>::read(r)?; )*
                #[allow(unused_mut)]
                let mut unknown = read_tagged(r)?;
                $( $(
                    let $tf = match unknown.remove(&$tag) {
                        Some(mut b) => <$tt as Wire>::read(&mut b)?,
                        None => $td,
                    };
                )* )?
                Ok(Self {
                    $( $f, )*
                    $( $( $tf, )* )?
                    unknown_tagged_fields: unknown,
                })
            }
        }

        kafka_codec!($name);
    };
}

// ---------------------------------------------------------------------------------------------
// CreateMirror (94)

wire_struct! {
    /// One mirror setting (`bootstrap.servers`, security settings, sync intervals, filters...).
    pub struct MirrorConfig {
        name: String,
        value: Option<String>,
    }
}

wire_struct! {
    /// CreateMirror request: name plus its settings.
    pub struct CreateMirrorRequest {
        mirror_name: String,
        configs: Vec<MirrorConfig>,
    }
    tagged {
        /// kmirror: alter an existing mirror's settings instead (`kmirror mirror alter`): the
        /// configs are merged into its settings, a null value removes a key. Its fetchers
        /// and metadata sync reconnect with the new settings.
        alter: bool = false => KMIRROR_TAG_BASE,
    }
}

wire_struct! {
    /// Response shared by CreateMirror and DeleteMirror.
    pub struct SimpleMirrorResponse {
        throttle_time_ms: i32,
        error_code: i16,
        error_message: Option<String>,
    }
}

/// CreateMirror response.
pub type CreateMirrorResponse = SimpleMirrorResponse;

// ---------------------------------------------------------------------------------------------
// AddTopicsToMirror = StartMirrorTopics (95)

wire_struct! {
    /// A topic to attach to a mirror. `topic_id` nil and `num_partitions` -1 mean "look them
    /// up on the source".
    pub struct StartTopic {
        topic_id: Uuid,
        topic_name: String,
        num_partitions: i32,
    }
}

wire_struct! {
    /// AddTopicsToMirror / StartMirrorTopics request: explicit topics and/or regexes; a source
    /// topic created later that matches an include pattern joins automatically.
    pub struct AddTopicsToMirrorRequest {
        mirror_name: String,
        topics: Vec<StartTopic>,
        include_patterns: Vec<String>,
        exclude_patterns: Vec<String>,
        state_validation_offset: i64,
    }
    tagged {
        /// kmirror: compute and return the per-partition truncation plan, change nothing
        /// (`kmirror mirror add --dry-run`).
        validate_only: bool = false => KMIRROR_TAG_BASE,
        /// kmirror: where the added topics' mirror logs start (`add --start`), as a
        /// ListOffsets timestamp: -2 earliest (the default), -1 latest, or epoch ms.
        start_timestamp: i64 = -2 => KMIRROR_TAG_BASE + 1,
    }
}

wire_struct! {
    /// Dry-run plan for one partition: the local log would be truncated from
    /// `local_end_offset` down to `truncate_to` (equal when nothing is lost).
    pub struct TruncationPlan {
        partition_index: i32,
        local_end_offset: i64,
        truncate_to: i64,
    }
}

wire_struct! {
    /// Per-topic result of Add/Remove/Pause/Resume.
    pub struct TopicResult {
        name: String,
        error_code: i16,
    }
    tagged {
        /// kmirror: human-readable reason when `error_code` != 0.
        error_message: Option<String> = None => KMIRROR_TAG_BASE,
        /// kmirror: dry-run truncation plan (AddTopicsToMirror with validate_only).
        truncation_plan: Vec<TruncationPlan> = Vec::new() => KMIRROR_TAG_BASE + 1,
        /// kmirror: RemoveTopicsFromMirror: per partition, the offset its log ends at after
        /// the failover (the source's records below it are mirrored).
        stopped_at: Vec<PartitionOffset> = Vec::new() => KMIRROR_TAG_BASE + 2,
    }
}

wire_struct! {
    /// A partition and an offset.
    pub struct PartitionOffset {
        partition_index: i32,
        offset: i64,
    }
}

wire_struct! {
    /// Response shared by Add/Remove/Pause/Resume (same schema upstream for all four).
    pub struct MirrorTopicsResponse {
        throttle_time_ms: i32,
        error_code: i16,
        error_message: Option<String>,
        mirror_name: String,
        topics: Vec<TopicResult>,
    }
}

/// AddTopicsToMirror response.
pub type AddTopicsToMirrorResponse = MirrorTopicsResponse;

// ---------------------------------------------------------------------------------------------
// RemoveTopicsFromMirror = StopMirrorTopics (96)

wire_struct! {
    /// A topic named by name only.
    pub struct TopicName {
        topic_name: String,
    }
}

wire_struct! {
    /// RemoveTopicsFromMirror / StopMirrorTopics request (failover).
    pub struct RemoveTopicsFromMirrorRequest {
        mirror_name: String,
        topics: Vec<TopicName>,
        state_validation_offset: i64,
    }
    tagged {
        /// Upstream tag 0: patterns to drop from the include list / add to the exclude list.
        patterns: Vec<String> = Vec::new() => 0,
        /// kmirror (`remove --wait-for-sync`): fail the topics over only once every chosen
        /// partition has mirrored up to the source's last stable offset read after this
        /// request arrived; give up after this many ms (REQUEST_TIMED_OUT, nothing failed
        /// over). -1: no wait.
        wait_for_sync_ms: i64 = -1 => KMIRROR_TAG_BASE,
    }
}

/// RemoveTopicsFromMirror response.
pub type RemoveTopicsFromMirrorResponse = MirrorTopicsResponse;

// ---------------------------------------------------------------------------------------------
// Pause (102) / Resume (103)

wire_struct! {
    /// A topic named by id and name (id may be nil: kmirror resolves by name).
    pub struct TopicRef {
        topic_id: Uuid,
        topic_name: String,
    }
}

wire_struct! {
    /// Body of PauseMirrorTopics and ResumeMirrorTopics (same schema, different keys).
    pub struct PauseResumeTopics {
        mirror_name: String,
        topics: Vec<TopicRef>,
    }
}

// ---------------------------------------------------------------------------------------------
// LastMirroredEpochs (97)

wire_struct! {
    pub struct PartitionIndex {
        partition_index: i32,
    }
}

wire_struct! {
    pub struct TopicPartitionsQuery {
        name: String,
        partitions: Vec<PartitionIndex>,
    }
}

wire_struct! {
    /// LastMirroredEpochs request: which partitions' LME the caller wants.
    pub struct LastMirroredEpochsRequest {
        mirror_name: String,
        topics: Vec<TopicPartitionsQuery>,
    }
}

wire_struct! {
    pub struct LmePartition {
        partition_index: i32,
        last_mirrored_epoch: i32,
        error_code: i16,
    }
}

wire_struct! {
    pub struct LmeTopic {
        name: String,
        partitions: Vec<LmePartition>,
    }
}

wire_struct! {
    /// LastMirroredEpochs response; -1 = no LME recorded.
    pub struct LastMirroredEpochsResponse {
        throttle_time_ms: i32,
        error_code: i16,
        error_message: Option<String>,
        topics: Vec<LmeTopic>,
    }
}

// ---------------------------------------------------------------------------------------------
// ListMirrors (98)

wire_struct! {
    /// ListMirrors request (no fields).
    pub struct ListMirrorsRequest {}
}

wire_struct! {
    pub struct ListedMirror {
        mirror_name: String,
        source_bootstrap: String,
        source_cluster_id: String,
        topic_count: i32,
    }
    tagged {
        /// kmirror: the mirror's health (see DescribedMirror's).
        link_state: Option<String> = None => KMIRROR_TAG_BASE,
    }
}

wire_struct! {
    pub struct ListMirrorsResponse {
        throttle_time_ms: i32,
        error_code: i16,
        error_message: Option<String>,
        mirrors: Vec<ListedMirror>,
    }
}

// ---------------------------------------------------------------------------------------------
// DescribeMirrors (99)

wire_struct! {
    /// DescribeMirrors request; empty `mirror_names` = all mirrors.
    pub struct DescribeMirrorsRequest {
        mirror_names: Vec<String>,
        include_authorized_operations: bool,
    }
}

wire_struct! {
    /// Per-partition mirror status. Offsets/lag are -1 while unknown.
    pub struct PartitionDetail {
        partition_index: i32,
        source_offset: i64,
        destination_offset: i64,
        lag: i64,
        state: String,
        last_mirror_epoch: i32,
    }
    tagged {
        /// kmirror: lag in milliseconds (keeps growing while paused or stalled); -1 unknown.
        lag_ms: i64 = -1 => KMIRROR_TAG_BASE,
        /// kmirror: why the partition is FAILED (or the last fetch error being retried).
        failure_reason: Option<String> = None => KMIRROR_TAG_BASE + 1,
        /// kmirror: offsets the source deleted (retention, DeleteRecords) before they were
        /// mirrored, summed over this node's life; the gap is reported, never silent.
        lost_records: i64 = 0 => KMIRROR_TAG_BASE + 2,
        /// kmirror: the latest such gap, `[lost_from, lost_to)`; -1 when none.
        lost_from: i64 = -1 => KMIRROR_TAG_BASE + 3,
        lost_to: i64 = -1 => KMIRROR_TAG_BASE + 4,
        /// kmirror: the engine core that owns the partition on this broker (its log and its
        /// fetcher); -1 unknown.
        core: i32 = -1 => KMIRROR_TAG_BASE + 5,
    }
}

wire_struct! {
    pub struct DescribedTopic {
        topic_name: String,
        partitions: Vec<PartitionDetail>,
    }
}

wire_struct! {
    pub struct DescribedMirror {
        error_code: i16,
        mirror_name: String,
        authorized_operations: i32,
        topics: Vec<DescribedTopic>,
    }
    tagged {
        /// kmirror: the mirror's source bootstrap servers.
        source_bootstrap: Option<String> = None => KMIRROR_TAG_BASE,
        /// kmirror: the mirror's settings, secrets (passwords, JAAS config, tokens, keys)
        /// replaced by `[hidden]` before they leave the broker.
        configs: Vec<MirrorConfig> = Vec::new() => KMIRROR_TAG_BASE + 1,
        /// kmirror: why the mirror's metadata sync with the source is failing (e.g. SASL
        /// authentication refused), while it is.
        sync_error: Option<String> = None => KMIRROR_TAG_BASE + 2,
        /// kmirror: source ACL bindings and quota entities the last sync round left to
        /// another owner (a local admin or another mirror), each with its owner.
        sync_clashes: Vec<String> = Vec::new() => KMIRROR_TAG_BASE + 3,
        /// kmirror: the mirror's health: ACTIVE, PAUSED, DEGRADED or SOURCE_UNAVAILABLE.
        link_state: Option<String> = None => KMIRROR_TAG_BASE + 4,
        /// kmirror: since when (epoch ms) the source is unavailable; -1 otherwise.
        source_unavailable_since_ms: i64 = -1 => KMIRROR_TAG_BASE + 5,
        /// kmirror: the FAILED partitions (`topic-partition`) of a DEGRADED mirror.
        failed_partitions: Vec<String> = Vec::new() => KMIRROR_TAG_BASE + 6,
    }
}

wire_struct! {
    pub struct DescribeMirrorsResponse {
        throttle_time_ms: i32,
        error_code: i16,
        error_message: Option<String>,
        mirrors: Vec<DescribedMirror>,
    }
}

// ---------------------------------------------------------------------------------------------
// DeleteMirror (104)

wire_struct! {
    pub struct DeleteMirrorRequest {
        mirror_name: String,
    }
}

/// DeleteMirror response.
pub type DeleteMirrorResponse = SimpleMirrorResponse;

// ---------------------------------------------------------------------------------------------
// Inter-broker APIs the seeds define: ReadMirrorStates (100), WriteMirrorStates (101),
// BumpLeaderEpochs (105). Schemas as in seed 003 (seed 000's copy is garbled where the wiki
// showed edits: "LastMirroredOffsetLastMirrorEpoch int64int32"); the responses keep seed
// 000's ErrorMessage. In a cluster the mirror coordinator's seat answers them.

wire_struct! {
    /// ReadMirrorStates request. `need_partition_states` false asks for topic names only
    /// (the seed's default is true; `Default` here gives false, so set it).
    pub struct ReadMirrorStatesRequest {
        mirror_name: String,
        topics: Vec<TopicPartitionsQuery>,
        need_partition_states: bool,
    }
}

wire_struct! {
    pub struct MirrorStatePartition {
        partition_index: i32,
        /// The last mirrored record offset; -1 when none was written.
        last_mirrored_offset: i64,
        state: i8,
        error_code: i16,
    }
}

wire_struct! {
    pub struct MirrorStateTopic {
        name: String,
        partitions: Vec<MirrorStatePartition>,
    }
}

wire_struct! {
    pub struct ReadMirrorStatesResponse {
        throttle_time_ms: i32,
        error_code: i16,
        error_message: Option<String>,
        topics: Vec<MirrorStateTopic>,
    }
}

wire_struct! {
    pub struct WriteStatePartition {
        partition_index: i32,
        last_mirrored_offset: i64,
        state: i8,
    }
}

wire_struct! {
    pub struct WriteStateTopic {
        name: String,
        partitions: Vec<WriteStatePartition>,
    }
}

wire_struct! {
    /// WriteMirrorStates request: partition states (and last mirrored offsets) to persist
    /// in the coordinator's store.
    pub struct WriteMirrorStatesRequest {
        mirror_name: String,
        topics_updated: Vec<WriteStateTopic>,
        removed_topics: Vec<String>,
    }
}

wire_struct! {
    pub struct WriteMirrorStatesResponse {
        throttle_time_ms: i32,
        error_code: i16,
        error_message: Option<String>,
        topics: Vec<TopicPartitionErrors>,
    }
}

wire_struct! {
    pub struct BumpEpochPartition {
        partition_index: i32,
        min_leader_epoch: i32,
    }
}

wire_struct! {
    pub struct BumpEpochTopic {
        topic_id: Uuid,
        partitions: Vec<BumpEpochPartition>,
    }
}

wire_struct! {
    /// BumpLeaderEpochs request.
    pub struct BumpLeaderEpochsRequest {
        topics: Vec<BumpEpochTopic>,
    }
}

wire_struct! {
    pub struct PartitionError {
        partition_index: i32,
        error_code: i16,
    }
}

wire_struct! {
    pub struct TopicPartitionErrors {
        topic_name: String,
        partitions: Vec<PartitionError>,
    }
}

wire_struct! {
    pub struct BumpLeaderEpochsResponse {
        throttle_time_ms: i32,
        error_code: i16,
        topics: Vec<TopicPartitionErrors>,
    }
}

// ---------------------------------------------------------------------------------------------
// Request/response pairing and kafka-protocol trait glue.

/// A mirror API request: its key, name and response type.
pub trait MirrorRequest: Wire {
    const KEY: i16;
    const NAME: &'static str;
    type Response: Wire;
}

/// Newtype wrappers so requests sharing a schema get distinct keys.
macro_rules! request_newtype {
    ($(#[$m:meta])* $name:ident($inner:ty)) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Default)]
        pub struct $name(pub $inner);
        impl Wire for $name {
            fn write(&self, w: &mut BytesMut) {
                self.0.write(w)
            }
            fn read(r: &mut Bytes) -> Result<Self, CodecError> {
                Ok(Self(<$inner>::read(r)?))
            }
        }

        kafka_codec!($name);
    };
}
request_newtype!(
    /// PauseMirrorTopics request.
    PauseMirrorTopicsRequest(PauseResumeTopics)
);
request_newtype!(
    /// ResumeMirrorTopics request.
    ResumeMirrorTopicsRequest(PauseResumeTopics)
);

macro_rules! mirror_request {
    ($req:ty, $resp:ty, $key:expr, $name:expr) => {
        impl MirrorRequest for $req {
            const KEY: i16 = $key;
            const NAME: &'static str = $name;
            type Response = $resp;
        }

        impl kafka_protocol::protocol::Message for $req {
            const VERSIONS: kafka_protocol::protocol::VersionRange = ONLY_V0;
            const DEPRECATED_VERSIONS: Option<kafka_protocol::protocol::VersionRange> = None;
        }

        /// Request header v2 (flexible), as for every flexible request version.
        impl kafka_protocol::protocol::HeaderVersion for $req {
            fn header_version(_version: i16) -> i16 {
                2
            }
        }

        impl kafka_protocol::protocol::Request for $req {
            const KEY: i16 = $key;
            type Response = $resp;
        }
    };
}

/// The versions of every mirror API.
const ONLY_V0: kafka_protocol::protocol::VersionRange =
    kafka_protocol::protocol::VersionRange { min: 0, max: 0 };

/// Message and header version (response header v1, flexible) of the response bodies; a macro
/// of their own because several requests share one response schema.
macro_rules! mirror_response {
    ($($resp:ty),* $(,)?) => {
        $(
            impl kafka_protocol::protocol::Message for $resp {
                const VERSIONS: kafka_protocol::protocol::VersionRange = ONLY_V0;
                const DEPRECATED_VERSIONS: Option<kafka_protocol::protocol::VersionRange> = None;
            }

            impl kafka_protocol::protocol::HeaderVersion for $resp {
                fn header_version(_version: i16) -> i16 {
                    1
                }
            }
        )*
    };
}
mirror_response!(
    SimpleMirrorResponse,
    MirrorTopicsResponse,
    LastMirroredEpochsResponse,
    ListMirrorsResponse,
    DescribeMirrorsResponse,
    ReadMirrorStatesResponse,
    WriteMirrorStatesResponse,
    BumpLeaderEpochsResponse,
);
mirror_request!(
    CreateMirrorRequest,
    CreateMirrorResponse,
    api::CREATE_MIRROR,
    "CreateMirror"
);
mirror_request!(
    AddTopicsToMirrorRequest,
    MirrorTopicsResponse,
    api::ADD_TOPICS_TO_MIRROR,
    "AddTopicsToMirror"
);
mirror_request!(
    RemoveTopicsFromMirrorRequest,
    MirrorTopicsResponse,
    api::REMOVE_TOPICS_FROM_MIRROR,
    "RemoveTopicsFromMirror"
);
mirror_request!(
    LastMirroredEpochsRequest,
    LastMirroredEpochsResponse,
    api::LAST_MIRRORED_EPOCHS,
    "LastMirroredEpochs"
);
mirror_request!(
    ListMirrorsRequest,
    ListMirrorsResponse,
    api::LIST_MIRRORS,
    "ListMirrors"
);
mirror_request!(
    DescribeMirrorsRequest,
    DescribeMirrorsResponse,
    api::DESCRIBE_MIRRORS,
    "DescribeMirrors"
);
mirror_request!(
    ReadMirrorStatesRequest,
    ReadMirrorStatesResponse,
    api::READ_MIRROR_STATES,
    "ReadMirrorStates"
);
mirror_request!(
    WriteMirrorStatesRequest,
    WriteMirrorStatesResponse,
    api::WRITE_MIRROR_STATES,
    "WriteMirrorStates"
);
mirror_request!(
    PauseMirrorTopicsRequest,
    MirrorTopicsResponse,
    api::PAUSE_MIRROR_TOPICS,
    "PauseMirrorTopics"
);
mirror_request!(
    ResumeMirrorTopicsRequest,
    MirrorTopicsResponse,
    api::RESUME_MIRROR_TOPICS,
    "ResumeMirrorTopics"
);
mirror_request!(
    DeleteMirrorRequest,
    DeleteMirrorResponse,
    api::DELETE_MIRROR,
    "DeleteMirror"
);
mirror_request!(
    BumpLeaderEpochsRequest,
    BumpLeaderEpochsResponse,
    api::BUMP_LEADER_EPOCHS,
    "BumpLeaderEpochs"
);

/// Encode a message body (version 0) into a fresh buffer.
pub fn encode_body<T: Wire>(msg: &T) -> BytesMut {
    let mut w = BytesMut::new();
    msg.write(&mut w);
    w
}

/// Decode a message body of the given version; the whole buffer must be consumed.
pub fn decode_body<T: Wire>(
    api: &'static str,
    version: i16,
    mut body: Bytes,
) -> Result<T, CodecError> {
    if version != 0 {
        return Err(CodecError::UnsupportedVersion { api, version });
    }
    T::read(&mut body)
}

/// Request header v2 (flexible): key, version, correlation id, nullable client id (classic
/// INT16-length string), empty tagged fields. Written by hand because kafka-protocol's header
/// encoder refuses unknown API keys.
pub fn write_request_header_v2(
    w: &mut BytesMut,
    key: i16,
    version: i16,
    correlation_id: i32,
    client_id: Option<&str>,
) {
    w.put_i16(key);
    w.put_i16(version);
    w.put_i32(correlation_id);
    match client_id {
        None => w.put_i16(-1),
        Some(c) => {
            w.put_i16(c.len() as i16);
            w.put_slice(c.as_bytes());
        }
    }
    put_uvarint(w, 0);
}

/// The parsed fixed part of a request header v2.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestHeaderV2 {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
}

/// Parse a request header v2 from the start of a frame, leaving `r` at the body.
pub fn read_request_header_v2(r: &mut Bytes) -> Result<RequestHeaderV2, CodecError> {
    need(r, 10)?;
    let api_key = r.get_i16();
    let api_version = r.get_i16();
    let correlation_id = r.get_i32();
    let len = r.get_i16();
    let client_id = if len < 0 {
        None
    } else {
        need(r, len as usize)?;
        let b = r.split_to(len as usize);
        Some(String::from_utf8(b.to_vec()).map_err(|_| CodecError::BadUtf8)?)
    };
    let _ = read_tagged(r)?;
    Ok(RequestHeaderV2 {
        api_key,
        api_version,
        correlation_id,
        client_id,
    })
}

/// Response header v1 (flexible): correlation id + empty tagged fields.
pub fn write_response_header_v1(w: &mut BytesMut, correlation_id: i32) {
    w.put_i32(correlation_id);
    put_uvarint(w, 0);
}

/// Parse a response header v1, returning the correlation id.
pub fn read_response_header_v1(r: &mut Bytes) -> Result<i32, CodecError> {
    need(r, 4)?;
    let id = r.get_i32();
    let _ = read_tagged(r)?;
    Ok(id)
}

/// Build the error response of a mirror API (same error for the whole request), e.g.
/// UNSUPPORTED_VERSION when `mirror.version` is 0. Returns the encoded body.
pub fn error_response_body(key: i16, error_code: i16, message: Option<&str>) -> Option<BytesMut> {
    let msg = message.map(str::to_owned);
    Some(match key {
        api::CREATE_MIRROR | api::DELETE_MIRROR => encode_body(&SimpleMirrorResponse {
            error_code,
            error_message: msg,
            ..Default::default()
        }),
        api::ADD_TOPICS_TO_MIRROR
        | api::REMOVE_TOPICS_FROM_MIRROR
        | api::PAUSE_MIRROR_TOPICS
        | api::RESUME_MIRROR_TOPICS => encode_body(&MirrorTopicsResponse {
            error_code,
            error_message: msg,
            ..Default::default()
        }),
        api::LAST_MIRRORED_EPOCHS => encode_body(&LastMirroredEpochsResponse {
            error_code,
            error_message: msg,
            ..Default::default()
        }),
        api::LIST_MIRRORS => encode_body(&ListMirrorsResponse {
            error_code,
            error_message: msg,
            ..Default::default()
        }),
        api::DESCRIBE_MIRRORS => encode_body(&DescribeMirrorsResponse {
            error_code,
            error_message: msg,
            ..Default::default()
        }),
        api::READ_MIRROR_STATES => encode_body(&ReadMirrorStatesResponse {
            error_code,
            error_message: msg,
            ..Default::default()
        }),
        api::WRITE_MIRROR_STATES => encode_body(&WriteMirrorStatesResponse {
            error_code,
            error_message: msg,
            ..Default::default()
        }),
        api::BUMP_LEADER_EPOCHS => encode_body(&BumpLeaderEpochsResponse {
            error_code,
            ..Default::default()
        }),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Message, Request};

    fn roundtrip<T>(msg: &T) -> T
    where
        T: Wire + Encodable + Decodable + PartialEq + std::fmt::Debug,
    {
        let enc = encode_body(msg).freeze();
        let mut r = enc.clone();
        let dec = T::read(&mut r).expect("decodes");
        assert_eq!(r.remaining(), 0, "decoder must consume the whole body");
        assert_eq!(&dec, msg);
        // Re-encoding is byte-identical.
        assert_eq!(encode_body(&dec).freeze(), enc);
        // kafka-protocol's traits write the same bytes and read the same message.
        let mut via = BytesMut::new();
        Encodable::encode(msg, &mut via, 0).expect("encodes");
        assert_eq!(via.freeze(), enc);
        assert_eq!(Encodable::compute_size(msg, 0).expect("sizes"), enc.len());
        let mut r = enc.clone();
        let via = <T as Decodable>::decode(&mut r, 0).expect("decodes");
        assert_eq!(r.remaining(), 0, "Decodable must consume the whole body");
        assert_eq!(&via, msg);
        dec
    }

    fn uuid(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    #[test]
    fn every_mirror_message_round_trips() {
        roundtrip(&CreateMirrorRequest {
            mirror_name: "dr".into(),
            configs: vec![
                MirrorConfig {
                    name: "bootstrap.servers".into(),
                    value: Some("127.0.0.1:9092".into()),
                    ..Default::default()
                },
                MirrorConfig {
                    name: "sasl.jaas.config".into(),
                    value: None,
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        roundtrip(&SimpleMirrorResponse {
            throttle_time_ms: 5,
            error_code: crate::keys::error::MIRROR_NOT_EMPTY,
            error_message: Some("2 topics".into()),
            ..Default::default()
        });
        roundtrip(&AddTopicsToMirrorRequest {
            mirror_name: "dr".into(),
            topics: vec![StartTopic {
                topic_id: uuid(7),
                topic_name: "orders".into(),
                num_partitions: 8,
                ..Default::default()
            }],
            include_patterns: vec!["pay.*".into()],
            exclude_patterns: vec!["pay-tmp".into()],
            state_validation_offset: -1,
            validate_only: true,
            ..Default::default()
        });
        roundtrip(&MirrorTopicsResponse {
            mirror_name: "dr".into(),
            topics: vec![TopicResult {
                name: "orders".into(),
                error_code: 0,
                error_message: Some("ok".into()),
                truncation_plan: vec![TruncationPlan {
                    partition_index: 3,
                    local_end_offset: 120,
                    truncate_to: 100,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        });
        roundtrip(&RemoveTopicsFromMirrorRequest {
            mirror_name: "dr".into(),
            topics: vec![TopicName {
                topic_name: "orders".into(),
                ..Default::default()
            }],
            state_validation_offset: -1,
            patterns: vec!["a.*".into()],
            ..Default::default()
        });
        roundtrip(&PauseMirrorTopicsRequest(PauseResumeTopics {
            mirror_name: "dr".into(),
            topics: vec![TopicRef {
                topic_id: uuid(1),
                topic_name: "t".into(),
                ..Default::default()
            }],
            ..Default::default()
        }));
        roundtrip(&ResumeMirrorTopicsRequest::default());
        roundtrip(&LastMirroredEpochsRequest {
            mirror_name: "back".into(),
            topics: vec![TopicPartitionsQuery {
                name: "orders".into(),
                partitions: vec![
                    PartitionIndex {
                        partition_index: 0,
                        ..Default::default()
                    },
                    PartitionIndex {
                        partition_index: 1,
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }],
            ..Default::default()
        });
        roundtrip(&LastMirroredEpochsResponse {
            topics: vec![LmeTopic {
                name: "orders".into(),
                partitions: vec![LmePartition {
                    partition_index: 0,
                    last_mirrored_epoch: 4,
                    error_code: 0,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        });
        roundtrip(&ListMirrorsRequest::default());
        roundtrip(&ListMirrorsResponse {
            mirrors: vec![ListedMirror {
                mirror_name: "dr".into(),
                source_bootstrap: "h:1".into(),
                source_cluster_id: "abc".into(),
                topic_count: 2,
                ..Default::default()
            }],
            ..Default::default()
        });
        roundtrip(&DescribeMirrorsRequest {
            mirror_names: vec!["dr".into()],
            include_authorized_operations: true,
            ..Default::default()
        });
        roundtrip(&DescribeMirrorsResponse {
            mirrors: vec![DescribedMirror {
                mirror_name: "dr".into(),
                authorized_operations: i32::MIN,
                source_bootstrap: Some("h:1".into()),
                topics: vec![DescribedTopic {
                    topic_name: "orders".into(),
                    partitions: vec![PartitionDetail {
                        partition_index: 0,
                        source_offset: 10,
                        destination_offset: 7,
                        lag: 3,
                        state: "MIRRORING".into(),
                        last_mirror_epoch: -1,
                        lag_ms: 250,
                        failure_reason: Some("CORRUPT_MESSAGE at 7".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        });
        roundtrip(&DeleteMirrorRequest {
            mirror_name: "dr".into(),
            ..Default::default()
        });
        roundtrip(&ReadMirrorStatesRequest::default());
        roundtrip(&ReadMirrorStatesResponse {
            topics: vec![MirrorStateTopic {
                name: "t".into(),
                partitions: vec![MirrorStatePartition {
                    partition_index: 2,
                    last_mirrored_offset: 1 << 40,
                    state: 2,
                    error_code: 0,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        });
        roundtrip(&WriteMirrorStatesRequest {
            mirror_name: "dr".into(),
            topics_updated: vec![WriteStateTopic {
                name: "t".into(),
                partitions: vec![WriteStatePartition {
                    partition_index: 1,
                    last_mirrored_offset: 77,
                    state: 2,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            removed_topics: vec!["old".into()],
            ..Default::default()
        });
        roundtrip(&WriteMirrorStatesResponse {
            error_message: Some("x".into()),
            ..Default::default()
        });
        roundtrip(&BumpLeaderEpochsRequest {
            topics: vec![BumpEpochTopic {
                topic_id: uuid(3),
                partitions: vec![BumpEpochPartition {
                    partition_index: 0,
                    min_leader_epoch: 12,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        });
        roundtrip(&BumpLeaderEpochsResponse {
            topics: vec![TopicPartitionErrors {
                topic_name: "t".into(),
                partitions: vec![PartitionError {
                    partition_index: 0,
                    error_code: 0,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        });
    }

    #[test]
    fn mirror_state_schemas_match_seed_003() {
        // ReadMirrorStates request: compact string "dr", empty compact array, bool
        // NeedPartitionStates, no tags.
        let req = ReadMirrorStatesRequest {
            mirror_name: "dr".into(),
            need_partition_states: true,
            ..Default::default()
        };
        assert_eq!(&encode_body(&req)[..], &[3, b'd', b'r', 1, 1, 0]);
        // A response partition: int32 index, int64 LastMirroredOffset, int8 state, int16
        // error, no tags.
        let p = MirrorStatePartition {
            partition_index: 1,
            last_mirrored_offset: 5,
            state: 2,
            error_code: 0,
            ..Default::default()
        };
        assert_eq!(
            &encode_body(&p)[..],
            &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 5, 2, 0, 0, 0]
        );
    }

    #[test]
    fn create_mirror_request_matches_hand_built_upstream_bytes() {
        // Built by hand from the upstream schema: compact string "dr", compact array of one
        // {compact string "k", compact nullable string null, no tags}, no tags.
        let expected: &[u8] = &[3, b'd', b'r', 2, 2, b'k', 0, 0, 0];
        let msg = CreateMirrorRequest {
            mirror_name: "dr".into(),
            configs: vec![MirrorConfig {
                name: "k".into(),
                value: None,
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(&encode_body(&msg)[..], expected);
    }

    #[test]
    fn kafka_protocol_traits_encode_exactly_the_wire_bytes() {
        // The same hand-built bytes, plus kmirror's `alter` tag (10000 = uvarint 0x90 0x4e,
        // one byte long, true) in the trailing tag section.
        let expected: &[u8] = &[3, b'd', b'r', 2, 2, b'k', 0, 0, 1, 0x90, 0x4e, 1, 1];
        let msg = CreateMirrorRequest {
            mirror_name: "dr".into(),
            configs: vec![MirrorConfig {
                name: "k".into(),
                value: None,
                ..Default::default()
            }],
            alter: true,
            ..Default::default()
        };
        assert_eq!(&encode_body(&msg)[..], expected);
        let mut out = BytesMut::new();
        msg.encode(&mut out, 0).unwrap();
        assert_eq!(&out[..], expected);
        // Decoding stops at the message's end and leaves what follows.
        let mut buf = Bytes::from([expected, &[0xAB][..]].concat());
        assert_eq!(CreateMirrorRequest::decode(&mut buf, 0).unwrap(), msg);
        assert_eq!(&buf[..], &[0xAB]);
    }

    #[test]
    fn kafka_protocol_traits_know_only_version_0_and_the_flexible_headers() {
        let msg = CreateMirrorRequest::default();
        assert!(msg.encode(&mut BytesMut::new(), 1).is_err());
        assert!(msg.compute_size(1).is_err());
        let mut b = encode_body(&msg).freeze();
        assert!(CreateMirrorRequest::decode(&mut b, 1).is_err());
        assert_eq!(<CreateMirrorRequest as Message>::VERSIONS.max, 0);
        assert_eq!(<CreateMirrorRequest as Request>::KEY, api::CREATE_MIRROR);
        assert_eq!(
            <PauseMirrorTopicsRequest as Request>::KEY,
            api::PAUSE_MIRROR_TOPICS
        );
        assert_eq!(CreateMirrorRequest::header_version(0), 2);
        assert_eq!(SimpleMirrorResponse::header_version(0), 1);
        // Truncated input is an error through the traits too.
        let mut short = Bytes::from_static(&[3, b'd']);
        assert!(CreateMirrorRequest::decode(&mut short, 0).is_err());
    }

    #[test]
    fn default_valued_tagged_fields_are_not_written() {
        let d = PartitionDetail {
            state: "MIRRORING".into(),
            ..Default::default()
        };
        let bytes = encode_body(&d);
        // Last byte is the tagged-field count: 0 when lag_ms=-1 and no failure reason.
        assert_eq!(*bytes.last().unwrap(), 0);
        let with = PartitionDetail {
            lag_ms: 5,
            ..d.clone()
        };
        assert!(encode_body(&with).len() > bytes.len());
    }

    #[test]
    fn unknown_tagged_fields_survive_decode_and_reencode() {
        // An upstream peer sends tag 0 (unknown to us) on DescribeMirrorsRequest.
        let mut w = BytesMut::new();
        vec!["dr".to_string()].write(&mut w);
        true.write(&mut w);
        put_uvarint(&mut w, 1);
        put_uvarint(&mut w, 0);
        put_uvarint(&mut w, 2);
        w.put_slice(&[0xAB, 0xCD]);
        let bytes = w.freeze();
        let dec = DescribeMirrorsRequest::read(&mut bytes.clone()).unwrap();
        assert_eq!(dec.mirror_names, vec!["dr".to_string()]);
        assert_eq!(
            dec.unknown_tagged_fields.get(&0).map(|b| &b[..]),
            Some(&[0xAB, 0xCD][..])
        );
        assert_eq!(encode_body(&dec).freeze(), bytes);
    }

    #[test]
    fn upstream_reader_skips_kmirror_tags_and_sees_upstream_fields() {
        // An upstream decoder reads the regular fields and skips all tags: emulate by decoding
        // into a struct without our tagged fields (TopicResult's regular part).
        let r = TopicResult {
            name: "orders".into(),
            error_code: 138,
            error_message: Some("not in mirror".into()),
            ..Default::default()
        };
        let mut b = encode_body(&r).freeze();
        assert_eq!(String::read(&mut b).unwrap(), "orders");
        assert_eq!(i16::read(&mut b).unwrap(), 138);
        let tags = read_tagged(&mut b).unwrap();
        assert!(tags.keys().all(|t| *t >= KMIRROR_TAG_BASE));
    }

    #[test]
    fn truncated_and_garbage_input_is_an_error_not_a_panic() {
        let full = encode_body(&DescribeMirrorsResponse {
            mirrors: vec![DescribedMirror {
                mirror_name: "dr".into(),
                ..Default::default()
            }],
            ..Default::default()
        })
        .freeze();
        for cut in 0..full.len() {
            let mut part = full.slice(..cut);
            assert!(
                DescribeMirrorsResponse::read(&mut part).is_err(),
                "cut {cut}"
            );
        }
        let mut huge = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(<Vec<String>>::read(&mut huge).is_err());
        assert!(decode_body::<ListMirrorsRequest>("ListMirrors", 1, Bytes::new()).is_err());
    }

    #[test]
    fn request_header_v2_round_trips_for_unknown_keys() {
        let mut w = BytesMut::new();
        write_request_header_v2(&mut w, api::CREATE_MIRROR, 0, 42, Some("kmirror-cli"));
        w.put_slice(b"body");
        let mut r = w.freeze();
        let h = read_request_header_v2(&mut r).unwrap();
        assert_eq!(h.api_key, 94);
        assert_eq!(h.correlation_id, 42);
        assert_eq!(h.client_id.as_deref(), Some("kmirror-cli"));
        assert_eq!(&r[..], b"body");
    }

    #[test]
    fn gated_error_response_decodes_with_unsupported_version() {
        for (key, _) in api::USER_FACING {
            let body = error_response_body(key, 35, Some("off"))
                .expect("mirror key")
                .freeze();
            // Every mirror response starts with throttle_time_ms then error_code.
            let mut r = body.clone();
            assert_eq!(i32::read(&mut r).unwrap(), 0);
            assert_eq!(i16::read(&mut r).unwrap(), 35, "key {key}");
        }
        assert!(error_response_body(1, 35, None).is_none());
    }
}
