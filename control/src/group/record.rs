//! Records of the offsets log (`__consumer_offsets-0/records.log`) in Kafka's own coordinator
//! record format (see `crate::coordinator_record`), with the schemas Kafka 4.1 writes:
//!
//! | type | key                                      | value (version written)                     |
//! |------|------------------------------------------|---------------------------------------------|
//! | 0, 1 | (Legacy)OffsetCommitKey group, topic, partition | OffsetCommitValue v4 (reads 0–4)     |
//! | 2    | GroupMetadataKey group                   | GroupMetadataValue v3 (reads 0–4)           |
//! | 3    | ConsumerGroupMetadataKey group           | ConsumerGroupMetadataValue v0 (epoch)       |
//! | 4    | ConsumerGroupPartitionMetadataKey group  | ConsumerGroupPartitionMetadataValue v0      |
//! | 5    | ConsumerGroupMemberMetadataKey group, member | ConsumerGroupMemberMetadataValue v0     |
//! | 6    | ConsumerGroupTargetAssignmentMetadataKey group | …TargetAssignmentMetadataValue v0     |
//! | 7    | ConsumerGroupTargetAssignmentMemberKey group, member | …TargetAssignmentMemberValue v0 |
//! | 8    | ConsumerGroupCurrentMemberAssignmentKey group, member | …CurrentMemberAssignmentValue v0 |
//!
//! A tombstone (no value) deletes its key: an offset, a classic group with all it holds, or one
//! consumer-group record. Kafka 4.1 replaced type 4 by a hash of the subscribed topics in
//! type 3 (KIP-1101) but still reads it; kmirror keeps the subscribed topics' ids and partition
//! counts there, which is what its assignor compares. Transactional offsets and their end are
//! [`Payload::Transactional`] / [`Payload::Marker`] (Kafka: a transactional batch and a
//! control batch).
//!
//! Replay applies records in order; the last record for a key wins. Records of the old JSON
//! encoding (`{"t": …}`) are still read, so an offsets log written before stays readable.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::consumer::{CMember, ClassicMeta, ConsumerGroup, MemberState, Parts, TopicView};
use crate::coordinator_record::{self as cr, DecodeError, Payload, Reader, Writer};
use crate::share::group_record::{GroupKey as ShareKey, GroupValue as ShareValue};

const LEGACY_OFFSET_COMMIT: i16 = 0;
const OFFSET_COMMIT: i16 = 1;
const GROUP_METADATA: i16 = 2;
const CG_METADATA: i16 = 3;
const CG_PARTITION_METADATA: i16 = 4;
const CG_MEMBER_METADATA: i16 = 5;
const CG_TARGET_ASSIGNMENT_METADATA: i16 = 6;
const CG_TARGET_ASSIGNMENT_MEMBER: i16 = 7;
const CG_CURRENT_MEMBER_ASSIGNMENT: i16 = 8;

/// OffsetCommitValue: version written, flexible from.
const OFFSET_VALUE_VERSION: i16 = 4;
const OFFSET_VALUE_FLEXIBLE: i16 = 4;
/// GroupMetadataValue: version written (Kafka 4.1's `newGroupMetadataRecord`), flexible from.
const GROUP_VALUE_VERSION: i16 = 3;
const GROUP_VALUE_FLEXIBLE: i16 = 4;

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub(crate) struct MemberRec {
    pub(crate) id: String,
    pub(crate) instance_id: Option<String>,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    pub(crate) session_timeout_ms: i32,
    pub(crate) rebalance_timeout_ms: i32,
    /// Metadata for the group's selected protocol.
    pub(crate) metadata: Vec<u8>,
    pub(crate) assignment: Vec<u8>,
}

/// A consumer-group member's subscription (ConsumerGroupMemberMetadataValue).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MemberSubscription {
    pub(crate) instance_id: Option<String>,
    pub(crate) rack_id: Option<String>,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    pub(crate) subscribed: Vec<String>,
    pub(crate) regex: Option<String>,
    pub(crate) rebalance_timeout_ms: i32,
    pub(crate) server_assignor: Option<String>,
    /// Tagged field 0 (ClassicMemberMetadata): set for a classic-protocol member.
    pub(crate) classic: Option<ClassicMeta>,
}

/// A consumer-group member's current assignment (ConsumerGroupCurrentMemberAssignmentValue).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CurrentAssignment {
    pub(crate) epoch: i32,
    pub(crate) previous_epoch: i32,
    pub(crate) state: MemberState,
    pub(crate) assigned: Parts,
    pub(crate) revoking: Parts,
}

/// One coordinator record. The variants without `serde(skip)` are also those of the old JSON
/// encoding, read by `decode`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "t")]
pub(crate) enum Rec {
    /// Group metadata after a generation completed (Stable with assignments, or Empty).
    Group {
        group: String,
        generation: i32,
        protocol_type: Option<String>,
        protocol: Option<String>,
        leader: Option<String>,
        members: Vec<MemberRec>,
        /// When the group became Empty (Kafka's currentStateTimestamp), for offset expiry.
        #[serde(default)]
        empty_since: Option<i64>,
    },
    /// DeleteGroups: the group and all its offsets are gone.
    GroupDeleted { group: String },
    Offset {
        group: String,
        topic: String,
        partition: i32,
        offset: i64,
        leader_epoch: i32,
        metadata: Option<String>,
        ts: i64,
    },
    OffsetDeleted {
        group: String,
        topic: String,
        partition: i32,
    },
    /// A TxnOffsetCommit, pending until the matching `TxnEnd`.
    TxnOffset {
        group: String,
        pid: i64,
        topic: String,
        partition: i32,
        offset: i64,
        leader_epoch: i32,
        metadata: Option<String>,
        ts: i64,
    },
    TxnEnd {
        group: String,
        pid: i64,
        commit: bool,
    },
    /// A KIP-848 consumer group's full state (replaces any classic metadata). Written as the
    /// `Cg*` records below ([`consumer_records`]); read back whole only from the old JSON.
    Consumer { group: String, state: ConsumerGroup },
    /// The group epoch; `None` ends the consumer group (its offsets stay).
    #[serde(skip)]
    CgEpoch { group: String, epoch: Option<i32> },
    /// The subscribed topics' ids and partition counts when the target was computed.
    #[serde(skip)]
    CgTopics {
        group: String,
        topics: Option<TopicView>,
    },
    #[serde(skip)]
    CgMember {
        group: String,
        member: String,
        sub: Option<MemberSubscription>,
    },
    #[serde(skip)]
    CgTargetEpoch { group: String, epoch: Option<i32> },
    #[serde(skip)]
    CgTarget {
        group: String,
        member: String,
        parts: Option<Parts>,
    },
    #[serde(skip)]
    CgCurrent {
        group: String,
        member: String,
        current: Option<CurrentAssignment>,
    },
    /// A share group's record (types 10–15; `None`: the key's tombstone).
    #[serde(skip)]
    Share {
        key: ShareKey,
        value: Option<ShareValue>,
    },
}

/// The records that make up `state` (no tombstones), in key order.
pub(crate) fn consumer_records(group: &str, state: &ConsumerGroup) -> Vec<Rec> {
    let g = || group.to_string();
    let mut out = vec![
        Rec::CgEpoch {
            group: g(),
            epoch: Some(state.epoch),
        },
        Rec::CgTopics {
            group: g(),
            topics: Some(state.subscribed_meta.clone()),
        },
    ];
    for (id, m) in &state.members {
        out.push(Rec::CgMember {
            group: g(),
            member: id.clone(),
            sub: Some(MemberSubscription::of(m)),
        });
    }
    out.push(Rec::CgTargetEpoch {
        group: g(),
        epoch: Some(state.target_epoch),
    });
    for (id, parts) in &state.target {
        out.push(Rec::CgTarget {
            group: g(),
            member: id.clone(),
            parts: Some(parts.clone()),
        });
    }
    for (id, m) in &state.members {
        out.push(Rec::CgCurrent {
            group: g(),
            member: id.clone(),
            current: Some(CurrentAssignment::of(m)),
        });
    }
    out
}

impl MemberSubscription {
    fn of(m: &CMember) -> MemberSubscription {
        MemberSubscription {
            instance_id: m.instance_id.clone(),
            rack_id: m.rack_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            subscribed: m.subscribed.clone(),
            regex: m.regex.clone(),
            rebalance_timeout_ms: m.rebalance_timeout_ms,
            server_assignor: m.server_assignor.clone(),
            classic: m.classic.clone(),
        }
    }

    pub(crate) fn apply(self, m: &mut CMember) {
        m.instance_id = self.instance_id;
        m.rack_id = self.rack_id;
        m.client_id = self.client_id;
        m.client_host = self.client_host;
        m.subscribed = self.subscribed;
        m.regex = self.regex;
        m.rebalance_timeout_ms = self.rebalance_timeout_ms;
        m.server_assignor = self.server_assignor;
        m.classic = self.classic;
    }
}

impl CurrentAssignment {
    fn of(m: &CMember) -> CurrentAssignment {
        CurrentAssignment {
            epoch: m.epoch,
            previous_epoch: m.previous_epoch,
            state: m.state,
            assigned: m.assigned.clone(),
            revoking: m.revoking.clone(),
        }
    }

    pub(crate) fn apply(self, m: &mut CMember) {
        m.epoch = self.epoch;
        m.previous_epoch = self.previous_epoch;
        m.state = self.state;
        m.assigned = self.assigned;
        m.revoking = self.revoking;
    }
}

/// Kafka's MemberState byte values.
fn state_byte(s: MemberState) -> i8 {
    match s {
        MemberState::Stable => 0,
        MemberState::UnrevokedPartitions => 1,
        MemberState::UnreleasedPartitions => 2,
    }
}

fn state_of(b: i8) -> Result<MemberState, DecodeError> {
    Ok(match b {
        0 => MemberState::Stable,
        1 => MemberState::UnrevokedPartitions,
        2 => MemberState::UnreleasedPartitions,
        b => return Err(format!("member state {b}")),
    })
}

impl Rec {
    /// The payloads of this record: one, or a consumer group's full set for `Consumer`.
    pub(crate) fn encode(&self) -> Vec<Vec<u8>> {
        match self {
            Rec::Consumer { group, state } => consumer_records(group, state)
                .iter()
                .flat_map(Rec::encode)
                .collect(),
            rec => vec![rec.payload().encode()],
        }
    }

    /// The key this record writes (for records of a consumer group's state).
    pub(crate) fn payload(&self) -> Payload {
        let record = Payload::record;
        match self {
            Rec::Group {
                group,
                generation,
                protocol_type,
                protocol,
                leader,
                members,
                empty_since,
            } => record(
                group_key(group),
                Some(cr::value(GROUP_VALUE_VERSION, GROUP_VALUE_FLEXIBLE, |w| {
                    // protocolType is not nullable: Kafka writes "" for none.
                    w.string(protocol_type.as_deref().unwrap_or(""));
                    w.i32(*generation);
                    w.nullable_string(protocol.as_deref());
                    w.nullable_string(leader.as_deref());
                    w.i64(empty_since.unwrap_or(-1));
                    w.array_len(members.len());
                    for m in members {
                        w.string(&m.id);
                        w.nullable_string(m.instance_id.as_deref());
                        w.string(&m.client_id);
                        w.string(&m.client_host);
                        w.i32(m.rebalance_timeout_ms);
                        w.i32(m.session_timeout_ms);
                        w.bytes(&m.metadata);
                        w.bytes(&m.assignment);
                        w.no_tagged_fields();
                    }
                    w.no_tagged_fields();
                })),
            ),
            Rec::GroupDeleted { group } => record(group_key(group), None),
            Rec::Share { key, value } => {
                record(key.encode(), value.as_ref().map(ShareValue::encode))
            }
            Rec::Offset {
                group,
                topic,
                partition,
                offset,
                leader_epoch,
                metadata,
                ts,
            } => record(
                offset_key(group, topic, *partition),
                Some(offset_value(*offset, *leader_epoch, metadata, *ts)),
            ),
            Rec::OffsetDeleted {
                group,
                topic,
                partition,
            } => record(offset_key(group, topic, *partition), None),
            Rec::TxnOffset {
                group,
                pid,
                topic,
                partition,
                offset,
                leader_epoch,
                metadata,
                ts,
            } => Payload::Transactional {
                producer_id: *pid,
                key: offset_key(group, topic, *partition),
                value: Some(offset_value(*offset, *leader_epoch, metadata, *ts)),
            },
            Rec::TxnEnd { group, pid, commit } => Payload::Marker {
                producer_id: *pid,
                commit: *commit,
                group: group.clone(),
            },
            Rec::Consumer { .. } => unreachable!("a consumer group's state is several records"),
            Rec::CgEpoch { group, epoch } => record(
                cr::key(CG_METADATA, |w| w.string(group)),
                epoch.map(|e| {
                    flexible_value(|w| {
                        w.i32(e);
                    })
                }),
            ),
            Rec::CgTopics { group, topics } => record(
                cr::key(CG_PARTITION_METADATA, |w| w.string(group)),
                topics.as_ref().map(|t| {
                    flexible_value(|w| {
                        w.array_len(t.len());
                        for (name, (id, partitions)) in t {
                            w.uuid(*id);
                            w.string(name);
                            w.i32(*partitions);
                            // PartitionMetadata (racks): unused since Kafka 4.0.
                            w.array_len(0);
                            w.no_tagged_fields();
                        }
                    })
                }),
            ),
            Rec::CgMember { group, member, sub } => record(
                member_key(CG_MEMBER_METADATA, group, member),
                sub.as_ref().map(|s| {
                    cr::value(0, 0, |w| {
                        w.nullable_string(s.instance_id.as_deref());
                        w.nullable_string(s.rack_id.as_deref());
                        w.string(&s.client_id);
                        w.string(&s.client_host);
                        w.array_len(s.subscribed.len());
                        for t in &s.subscribed {
                            w.string(t);
                        }
                        w.nullable_string(s.regex.as_deref());
                        w.i32(s.rebalance_timeout_ms);
                        w.nullable_string(s.server_assignor.as_deref());
                        let tagged: Vec<(u32, Vec<u8>)> =
                            s.classic.iter().map(|c| (0, classic_meta(c))).collect();
                        w.tagged_fields(&tagged);
                    })
                }),
            ),
            Rec::CgTargetEpoch { group, epoch } => record(
                cr::key(CG_TARGET_ASSIGNMENT_METADATA, |w| w.string(group)),
                epoch.map(|e| {
                    flexible_value(|w| {
                        w.i32(e);
                    })
                }),
            ),
            Rec::CgTarget {
                group,
                member,
                parts,
            } => record(
                member_key(CG_TARGET_ASSIGNMENT_MEMBER, group, member),
                parts
                    .as_ref()
                    .map(|p| flexible_value(|w| write_parts(w, p))),
            ),
            Rec::CgCurrent {
                group,
                member,
                current,
            } => record(
                member_key(CG_CURRENT_MEMBER_ASSIGNMENT, group, member),
                current.as_ref().map(|c| {
                    flexible_value(|w| {
                        w.i32(c.epoch);
                        w.i32(c.previous_epoch);
                        w.i8(state_byte(c.state));
                        write_parts(w, &c.assigned);
                        write_parts(w, &c.revoking);
                    })
                }),
            ),
        }
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Rec, DecodeError> {
        if cr::is_legacy_json(bytes) {
            return serde_json::from_slice(bytes).map_err(|e| e.to_string());
        }
        match Payload::decode(bytes)? {
            Payload::Record { key, value, .. } => decode_record(&key, value.as_deref()),
            Payload::Transactional {
                producer_id,
                key,
                value,
            } => match decode_record(&key, value.as_deref())? {
                Rec::Offset {
                    group,
                    topic,
                    partition,
                    offset,
                    leader_epoch,
                    metadata,
                    ts,
                } => Ok(Rec::TxnOffset {
                    group,
                    pid: producer_id,
                    topic,
                    partition,
                    offset,
                    leader_epoch,
                    metadata,
                    ts,
                }),
                other => Err(format!("transactional record {other:?}")),
            },
            Payload::Marker {
                producer_id,
                commit,
                group,
            } => Ok(Rec::TxnEnd {
                group,
                pid: producer_id,
                commit,
            }),
            p @ Payload::ProducerIdBlock { .. } => Err(format!("not a group record: {p:?}")),
        }
    }
}

fn offset_key(group: &str, topic: &str, partition: i32) -> Vec<u8> {
    cr::key(OFFSET_COMMIT, |w| {
        w.string(group);
        w.string(topic);
        w.i32(partition);
    })
}

fn group_key(group: &str) -> Vec<u8> {
    cr::key(GROUP_METADATA, |w| w.string(group))
}

fn member_key(record_type: i16, group: &str, member: &str) -> Vec<u8> {
    cr::key(record_type, |w| {
        w.string(group);
        w.string(member);
    })
}

/// OffsetCommitValue v4. `metadata` is not nullable: Kafka stores a missing one as "".
fn offset_value(offset: i64, leader_epoch: i32, metadata: &Option<String>, ts: i64) -> Vec<u8> {
    cr::value(OFFSET_VALUE_VERSION, OFFSET_VALUE_FLEXIBLE, |w| {
        w.i64(offset);
        w.i32(leader_epoch);
        w.string(metadata.as_deref().unwrap_or(""));
        w.i64(ts);
        // topicId (tag 0) is written only when known; kmirror's commits do not carry it.
        w.no_tagged_fields();
    })
}

/// A KIP-848 value: version 0, flexible, no tagged fields of ours.
fn flexible_value(fields: impl FnOnce(&mut Writer)) -> Vec<u8> {
    cr::value(0, 0, |w| {
        fields(w);
        w.no_tagged_fields();
    })
}

/// ClassicMemberMetadata as a tagged field's data: a nullable struct, so a presence byte first.
fn classic_meta(c: &ClassicMeta) -> Vec<u8> {
    cr::flexible(|w| {
        w.i8(1);
        w.i32(c.session_timeout_ms);
        w.array_len(c.protocols.len());
        for (name, metadata) in &c.protocols {
            w.string(name);
            w.bytes(metadata);
            w.no_tagged_fields();
        }
        w.no_tagged_fields();
    })
}

fn read_classic_meta(r: &mut Reader<'_>) -> Result<Option<ClassicMeta>, DecodeError> {
    if r.i8()? < 0 {
        return Ok(None);
    }
    let session_timeout_ms = r.i32()?;
    let mut protocols = Vec::new();
    for _ in 0..r.array_len()? {
        let name = r.string()?;
        let metadata = r.bytes()?;
        r.tagged_fields(|_, _| Ok(()))?;
        protocols.push((name, metadata));
    }
    r.tagged_fields(|_, _| Ok(()))?;
    Ok(Some(ClassicMeta {
        session_timeout_ms,
        protocols,
    }))
}

fn write_parts(w: &mut Writer, parts: &Parts) {
    w.array_len(parts.len());
    for (id, ps) in parts {
        w.uuid(*id);
        w.array_len(ps.len());
        for p in ps {
            w.i32(*p);
        }
        w.no_tagged_fields();
    }
}

fn read_parts(r: &mut Reader<'_>) -> Result<Parts, DecodeError> {
    let mut parts = Parts::new();
    for _ in 0..r.array_len()? {
        let id = r.uuid()?;
        let mut set = BTreeSet::new();
        for _ in 0..r.array_len()? {
            set.insert(r.i32()?);
        }
        r.tagged_fields(|_, _| Ok(()))?;
        parts.insert(id, set);
    }
    Ok(parts)
}

/// Reads a KIP-848 value (version 0) with `fields`, then its tagged fields and the end.
fn read_flexible<T>(
    value: &[u8],
    fields: impl FnOnce(&mut Reader<'_>) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    let (_, mut r) = Reader::value(value, 0..=0, 0)?;
    let out = fields(&mut r)?;
    r.tagged_fields(|_, _| Ok(()))?;
    r.end()?;
    Ok(out)
}

fn decode_record(key: &[u8], value: Option<&[u8]>) -> Result<Rec, DecodeError> {
    let (record_type, mut k) = Reader::key(key)?;
    let group = k.string()?;
    let rec = match record_type {
        LEGACY_OFFSET_COMMIT | OFFSET_COMMIT => {
            let topic = k.string()?;
            let partition = k.i32()?;
            match value {
                None => Rec::OffsetDeleted {
                    group,
                    topic,
                    partition,
                },
                Some(v) => {
                    let (version, mut r) = Reader::value(v, 0..=4, OFFSET_VALUE_FLEXIBLE)?;
                    let offset = r.i64()?;
                    let leader_epoch = if version >= 3 { r.i32()? } else { -1 };
                    let metadata = r.string()?;
                    let ts = r.i64()?;
                    if version == 1 {
                        let _expire_timestamp = r.i64()?;
                    }
                    r.tagged_fields(|_, _| Ok(()))?;
                    r.end()?;
                    Rec::Offset {
                        group,
                        topic,
                        partition,
                        offset,
                        leader_epoch,
                        metadata: Some(metadata),
                        ts,
                    }
                }
            }
        }
        10..=15 => {
            // The share key is read whole from its bytes; `k` is not used for it.
            let key = ShareKey::decode(key)?.ok_or("not a share-group key")?;
            let value = value.map(|v| ShareValue::decode(&key, v)).transpose()?;
            return Ok(Rec::Share { key, value });
        }
        GROUP_METADATA => match value {
            None => Rec::GroupDeleted { group },
            Some(v) => {
                let (version, mut r) = Reader::value(v, 0..=4, GROUP_VALUE_FLEXIBLE)?;
                let protocol_type = r.string()?;
                let generation = r.i32()?;
                let protocol = r.nullable_string()?;
                let leader = r.nullable_string()?;
                let state_ts = if version >= 2 { r.i64()? } else { -1 };
                let mut members = Vec::new();
                for _ in 0..r.array_len()? {
                    let id = r.string()?;
                    let instance_id = if version >= 3 {
                        r.nullable_string()?
                    } else {
                        None
                    };
                    let client_id = r.string()?;
                    let client_host = r.string()?;
                    let rebalance = if version >= 1 { Some(r.i32()?) } else { None };
                    let session_timeout_ms = r.i32()?;
                    let metadata = r.bytes()?;
                    let assignment = r.bytes()?;
                    r.tagged_fields(|_, _| Ok(()))?;
                    members.push(MemberRec {
                        id,
                        instance_id,
                        client_id,
                        client_host,
                        session_timeout_ms,
                        // Before version 1 the rebalance timeout was the session timeout.
                        rebalance_timeout_ms: rebalance.unwrap_or(session_timeout_ms),
                        metadata,
                        assignment,
                    });
                }
                r.tagged_fields(|_, _| Ok(()))?;
                r.end()?;
                Rec::Group {
                    group,
                    generation,
                    protocol_type: Some(protocol_type).filter(|p| !p.is_empty()),
                    protocol,
                    leader,
                    // kmirror reads it only while the group is Empty (offset expiry).
                    empty_since: Some(state_ts).filter(|t| *t >= 0 && members.is_empty()),
                    members,
                }
            }
        },
        CG_METADATA => Rec::CgEpoch {
            group,
            epoch: value.map(|v| read_flexible(v, |r| r.i32())).transpose()?,
        },
        CG_PARTITION_METADATA => Rec::CgTopics {
            group,
            topics: value
                .map(|v| {
                    read_flexible(v, |r| {
                        let mut topics = TopicView::new();
                        for _ in 0..r.array_len()? {
                            let id = r.uuid()?;
                            let name = r.string()?;
                            let partitions = r.i32()?;
                            for _ in 0..r.array_len()? {
                                let _partition = r.i32()?;
                                for _ in 0..r.array_len()? {
                                    let _rack = r.string()?;
                                }
                                r.tagged_fields(|_, _| Ok(()))?;
                            }
                            r.tagged_fields(|_, _| Ok(()))?;
                            topics.insert(name, (id, partitions));
                        }
                        Ok(topics)
                    })
                })
                .transpose()?,
        },
        CG_MEMBER_METADATA => Rec::CgMember {
            group,
            member: k.string()?,
            sub: value
                .map(|v| {
                    let (_, mut r) = Reader::value(v, 0..=0, 0)?;
                    let r = &mut r;
                    let sub = (|| -> Result<MemberSubscription, DecodeError> {
                        let instance_id = r.nullable_string()?;
                        let rack_id = r.nullable_string()?;
                        let client_id = r.string()?;
                        let client_host = r.string()?;
                        let mut subscribed = Vec::new();
                        for _ in 0..r.array_len()? {
                            subscribed.push(r.string()?);
                        }
                        Ok(MemberSubscription {
                            instance_id,
                            rack_id,
                            client_id,
                            client_host,
                            subscribed,
                            regex: r.nullable_string()?,
                            rebalance_timeout_ms: r.i32()?,
                            server_assignor: r.nullable_string()?,
                            classic: None,
                        })
                    })();
                    let mut sub: MemberSubscription = sub?;
                    r.tagged_fields(|tag, f| {
                        if tag == 0 {
                            sub.classic = read_classic_meta(f)?;
                        }
                        Ok(())
                    })?;
                    r.end()?;
                    Ok::<_, DecodeError>(sub)
                })
                .transpose()?,
        },
        CG_TARGET_ASSIGNMENT_METADATA => Rec::CgTargetEpoch {
            group,
            epoch: value.map(|v| read_flexible(v, |r| r.i32())).transpose()?,
        },
        CG_TARGET_ASSIGNMENT_MEMBER => Rec::CgTarget {
            group,
            member: k.string()?,
            parts: value.map(|v| read_flexible(v, read_parts)).transpose()?,
        },
        CG_CURRENT_MEMBER_ASSIGNMENT => Rec::CgCurrent {
            group,
            member: k.string()?,
            current: value
                .map(|v| {
                    read_flexible(v, |r| {
                        Ok(CurrentAssignment {
                            epoch: r.i32()?,
                            previous_epoch: r.i32()?,
                            state: state_of(r.i8()?)?,
                            assigned: read_parts(r)?,
                            revoking: read_parts(r)?,
                        })
                    })
                })
                .transpose()?,
        },
        t => return Err(format!("record type {t} is not one kmirror writes")),
    };
    k.end()?;
    Ok(rec)
}

/// The keys of a consumer group's records and their payloads, to write only what changed.
pub(crate) fn keyed_payloads(records: &[Rec]) -> BTreeMap<Vec<u8>, Vec<u8>> {
    records
        .iter()
        .map(|r| {
            let p = r.payload();
            let Payload::Record { key, .. } = &p else {
                unreachable!("consumer group records are plain records")
            };
            (key.clone(), p.encode())
        })
        .collect()
}

/// The tombstone of a record key.
pub(crate) fn tombstone(key: &[u8]) -> Vec<u8> {
    Payload::record(key.to_vec(), None).encode()
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
