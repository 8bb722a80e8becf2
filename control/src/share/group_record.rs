//! The group coordinator's share-group records on `__consumer_offsets` (types 10–15, key and
//! value version 0; keys classic, values flexible), as Kafka 4.1 writes them.
//!
//! | type | key | value |
//! |---|---|---|
//! | 10 | GroupId, MemberId | ShareGroupMemberMetadata: RackId (nullable), ClientId, ClientHost, SubscribedTopicNames |
//! | 11 | GroupId | ShareGroupMetadata: Epoch, MetadataHash |
//! | 12 | GroupId | ShareGroupTargetAssignmentMetadata: AssignmentEpoch |
//! | 13 | GroupId, MemberId | ShareGroupTargetAssignmentMember: TopicPartitions |
//! | 14 | GroupId, MemberId | ShareGroupCurrentMemberAssignment: MemberEpoch, PreviousMemberEpoch, State, AssignedPartitions |
//! | 15 | GroupId | ShareGroupStatePartitionMetadata: InitializingTopics, InitializedTopics, DeletingTopics |
//!
//! A value of `None` is the key's tombstone.

use crate::coordinator_record::{self as rec, DecodeError, Reader, Writer};

/// Partitions of one topic (`TopicId`, `Partitions`).
pub type TopicPartitions = (uuid::Uuid, Vec<i32>);

/// A topic with a name and partitions (`TopicPartitionsInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPartitionsInfo {
    pub id: uuid::Uuid,
    pub name: String,
    pub partitions: Vec<i32>,
}

/// A share-group record's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupKey {
    MemberMetadata { group: String, member: String },
    Metadata { group: String },
    TargetAssignmentMetadata { group: String },
    TargetAssignmentMember { group: String, member: String },
    CurrentMemberAssignment { group: String, member: String },
    StatePartitionMetadata { group: String },
}

/// A share-group record's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupValue {
    MemberMetadata {
        rack_id: Option<String>,
        client_id: String,
        client_host: String,
        topics: Vec<String>,
    },
    Metadata {
        epoch: i32,
        metadata_hash: i64,
    },
    TargetAssignmentMetadata {
        assignment_epoch: i32,
    },
    TargetAssignmentMember {
        partitions: Vec<TopicPartitions>,
    },
    CurrentMemberAssignment {
        member_epoch: i32,
        previous_member_epoch: i32,
        state: i8,
        partitions: Vec<TopicPartitions>,
    },
    StatePartitionMetadata {
        initializing: Vec<TopicPartitionsInfo>,
        initialized: Vec<TopicPartitionsInfo>,
        deleting: Vec<(uuid::Uuid, String)>,
    },
}

impl GroupKey {
    fn record_type(&self) -> i16 {
        match self {
            GroupKey::MemberMetadata { .. } => 10,
            GroupKey::Metadata { .. } => 11,
            GroupKey::TargetAssignmentMetadata { .. } => 12,
            GroupKey::TargetAssignmentMember { .. } => 13,
            GroupKey::CurrentMemberAssignment { .. } => 14,
            GroupKey::StatePartitionMetadata { .. } => 15,
        }
    }

    /// The group the record belongs to.
    pub fn group(&self) -> &str {
        match self {
            GroupKey::MemberMetadata { group, .. }
            | GroupKey::Metadata { group }
            | GroupKey::TargetAssignmentMetadata { group }
            | GroupKey::TargetAssignmentMember { group, .. }
            | GroupKey::CurrentMemberAssignment { group, .. }
            | GroupKey::StatePartitionMetadata { group } => group,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        rec::key(self.record_type(), |w| match self {
            GroupKey::MemberMetadata { group, member }
            | GroupKey::TargetAssignmentMember { group, member }
            | GroupKey::CurrentMemberAssignment { group, member } => {
                w.string(group);
                w.string(member);
            }
            GroupKey::Metadata { group }
            | GroupKey::TargetAssignmentMetadata { group }
            | GroupKey::StatePartitionMetadata { group } => w.string(group),
        })
    }

    /// A share-group key; `None` for another record type (not a share-group record).
    pub fn decode(bytes: &[u8]) -> Result<Option<GroupKey>, DecodeError> {
        let (t, mut r) = Reader::key(bytes)?;
        let key = match t {
            10 | 13 | 14 => {
                let group = r.string()?;
                let member = r.string()?;
                match t {
                    10 => GroupKey::MemberMetadata { group, member },
                    13 => GroupKey::TargetAssignmentMember { group, member },
                    _ => GroupKey::CurrentMemberAssignment { group, member },
                }
            }
            11 => GroupKey::Metadata { group: r.string()? },
            12 => GroupKey::TargetAssignmentMetadata { group: r.string()? },
            15 => GroupKey::StatePartitionMetadata { group: r.string()? },
            _ => return Ok(None),
        };
        r.end()?;
        Ok(Some(key))
    }
}

fn write_topic_partitions(w: &mut Writer, tps: &[TopicPartitions]) {
    w.array_len(tps.len());
    for (id, ps) in tps {
        w.uuid(*id);
        w.array_len(ps.len());
        for p in ps {
            w.i32(*p);
        }
        w.no_tagged_fields();
    }
}

fn read_i32s(r: &mut Reader<'_>) -> Result<Vec<i32>, DecodeError> {
    let n = r.array_len()?;
    (0..n).map(|_| r.i32()).collect()
}

fn read_topic_partitions(r: &mut Reader<'_>) -> Result<Vec<TopicPartitions>, DecodeError> {
    let n = r.array_len()?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let id = r.uuid()?;
        let ps = read_i32s(r)?;
        r.tagged_fields(|_, _| Ok(()))?;
        out.push((id, ps));
    }
    Ok(out)
}

fn write_infos(w: &mut Writer, infos: &[TopicPartitionsInfo]) {
    w.array_len(infos.len());
    for i in infos {
        w.uuid(i.id);
        w.string(&i.name);
        w.array_len(i.partitions.len());
        for p in &i.partitions {
            w.i32(*p);
        }
        w.no_tagged_fields();
    }
}

fn read_infos(r: &mut Reader<'_>) -> Result<Vec<TopicPartitionsInfo>, DecodeError> {
    let n = r.array_len()?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let id = r.uuid()?;
        let name = r.string()?;
        let partitions = read_i32s(r)?;
        r.tagged_fields(|_, _| Ok(()))?;
        out.push(TopicPartitionsInfo {
            id,
            name,
            partitions,
        });
    }
    Ok(out)
}

impl GroupValue {
    pub fn encode(&self) -> Vec<u8> {
        rec::value(0, 0, |w| {
            match self {
                GroupValue::MemberMetadata {
                    rack_id,
                    client_id,
                    client_host,
                    topics,
                } => {
                    w.nullable_string(rack_id.as_deref());
                    w.string(client_id);
                    w.string(client_host);
                    w.array_len(topics.len());
                    for t in topics {
                        w.string(t);
                    }
                }
                GroupValue::Metadata {
                    epoch,
                    metadata_hash,
                } => {
                    w.i32(*epoch);
                    w.i64(*metadata_hash);
                }
                GroupValue::TargetAssignmentMetadata { assignment_epoch } => {
                    w.i32(*assignment_epoch)
                }
                GroupValue::TargetAssignmentMember { partitions } => {
                    write_topic_partitions(w, partitions)
                }
                GroupValue::CurrentMemberAssignment {
                    member_epoch,
                    previous_member_epoch,
                    state,
                    partitions,
                } => {
                    w.i32(*member_epoch);
                    w.i32(*previous_member_epoch);
                    w.i8(*state);
                    write_topic_partitions(w, partitions);
                }
                GroupValue::StatePartitionMetadata {
                    initializing,
                    initialized,
                    deleting,
                } => {
                    write_infos(w, initializing);
                    write_infos(w, initialized);
                    w.array_len(deleting.len());
                    for (id, name) in deleting {
                        w.uuid(*id);
                        w.string(name);
                        w.no_tagged_fields();
                    }
                }
            }
            w.no_tagged_fields();
        })
    }

    /// The value of a record whose key is `key`.
    pub fn decode(key: &GroupKey, bytes: &[u8]) -> Result<GroupValue, DecodeError> {
        let (_, mut r) = Reader::value(bytes, 0..=0, 0)?;
        let v = match key {
            GroupKey::MemberMetadata { .. } => {
                let rack_id = r.nullable_string()?;
                let client_id = r.string()?;
                let client_host = r.string()?;
                let n = r.array_len()?;
                let topics = (0..n).map(|_| r.string()).collect::<Result<_, _>>()?;
                GroupValue::MemberMetadata {
                    rack_id,
                    client_id,
                    client_host,
                    topics,
                }
            }
            GroupKey::Metadata { .. } => GroupValue::Metadata {
                epoch: r.i32()?,
                metadata_hash: r.i64()?,
            },
            GroupKey::TargetAssignmentMetadata { .. } => GroupValue::TargetAssignmentMetadata {
                assignment_epoch: r.i32()?,
            },
            GroupKey::TargetAssignmentMember { .. } => GroupValue::TargetAssignmentMember {
                partitions: read_topic_partitions(&mut r)?,
            },
            GroupKey::CurrentMemberAssignment { .. } => GroupValue::CurrentMemberAssignment {
                member_epoch: r.i32()?,
                previous_member_epoch: r.i32()?,
                state: r.i8()?,
                partitions: read_topic_partitions(&mut r)?,
            },
            GroupKey::StatePartitionMetadata { .. } => {
                let initializing = read_infos(&mut r)?;
                let initialized = read_infos(&mut r)?;
                let n = r.array_len()?;
                let mut deleting = Vec::with_capacity(n);
                for _ in 0..n {
                    let id = r.uuid()?;
                    let name = r.string()?;
                    r.tagged_fields(|_, _| Ok(()))?;
                    deleting.push((id, name));
                }
                GroupValue::StatePartitionMetadata {
                    initializing,
                    initialized,
                    deleting,
                }
            }
        };
        r.tagged_fields(|_, _| Ok(()))?;
        r.end()?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u128) -> uuid::Uuid {
        uuid::Uuid::from_u128(n)
    }

    #[test]
    fn every_record_round_trips_and_other_types_are_not_share_records() {
        let g = || "readers".to_string();
        let m = || "mmmmmmmmmmmmmmmmmmmmmm".to_string();
        let cases = vec![
            (
                GroupKey::MemberMetadata {
                    group: g(),
                    member: m(),
                },
                GroupValue::MemberMetadata {
                    rack_id: None,
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    topics: vec!["t".into(), "u".into()],
                },
            ),
            (
                GroupKey::Metadata { group: g() },
                GroupValue::Metadata {
                    epoch: 7,
                    metadata_hash: -3,
                },
            ),
            (
                GroupKey::TargetAssignmentMetadata { group: g() },
                GroupValue::TargetAssignmentMetadata {
                    assignment_epoch: 7,
                },
            ),
            (
                GroupKey::TargetAssignmentMember {
                    group: g(),
                    member: m(),
                },
                GroupValue::TargetAssignmentMember {
                    partitions: vec![(id(1), vec![0, 2])],
                },
            ),
            (
                GroupKey::CurrentMemberAssignment {
                    group: g(),
                    member: m(),
                },
                GroupValue::CurrentMemberAssignment {
                    member_epoch: 7,
                    previous_member_epoch: 6,
                    state: 0,
                    partitions: vec![(id(1), vec![1]), (id(2), vec![])],
                },
            ),
            (
                GroupKey::StatePartitionMetadata { group: g() },
                GroupValue::StatePartitionMetadata {
                    initializing: vec![TopicPartitionsInfo {
                        id: id(1),
                        name: "t".into(),
                        partitions: vec![3],
                    }],
                    initialized: vec![],
                    deleting: vec![(id(2), "u".into())],
                },
            ),
        ];
        for (k, v) in cases {
            let kb = k.encode();
            assert_eq!(i16::from_be_bytes([kb[0], kb[1]]), k.record_type());
            let k2 = GroupKey::decode(&kb).unwrap().unwrap();
            assert_eq!(k2, k);
            assert_eq!(k2.group(), "readers");
            let vb = v.encode();
            // Version 0, flexible.
            assert_eq!(&vb[..2], &[0, 0]);
            assert_eq!(GroupValue::decode(&k2, &vb).unwrap(), v);
        }
        // An OffsetCommit key (type 1) is not a share-group record.
        let other = rec::key(1, |w| w.string("g"));
        assert_eq!(GroupKey::decode(&other).unwrap(), None);
    }
}
