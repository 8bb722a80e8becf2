//! Share-group offset sync (KIP-932 groups, seed 000): the source's share-partition start
//! offsets of share groups that are not active on the destination, clamped to the mirrored
//! log like consumer-group offsets (`kmirror_control::mirror::plan_group_sync`), set through
//! each group's coordinator with AlterShareGroupOffsets carrying the mirror's private tag
//! (`kmirror_control::share::MIRROR_SYNC_TAG`), which creates the share group Empty when it
//! is missing. A share consumer that joins the destination after a failover resumes where
//! the source's group stood.
//!
//! Only the start offset is carried, not the in-flight window: records above it that the
//! source already acknowledged are delivered again on the destination (at-least-once, as a
//! consumer group's records after its last commit). A partition whose destination start
//! could not be read is not written that round (never re-initialized blindly), and nothing
//! is written until `share.version` is enabled on the destination.
//!
//! The broker is reached through [`ShareCoordinators`] only, so the round is tested without
//! one.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::{
    alter_share_group_offsets_request as alter, describe_share_group_offsets_request as describe,
    AlterShareGroupOffsetsRequest, ApiKey, DescribeShareGroupOffsetsRequest, GroupId,
    ReadShareGroupStateSummaryRequest, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kmirror_control::mirror::{plan_group_sync, MirrorDefinition};
use kmirror_types::TopicPartition;

use super::group_sync::GroupCoordinators;
use crate::keys::error as code;
use kafka_protocol::error::ResponseError;

const SHARE_STATE_TOPIC: &str = kmirror_control::metadata::SHARE_STATE_TOPIC;

/// A group's destination start offset per initialized partition, or why it is unknown.
type Starts = BTreeMap<TopicPartition, Result<i64, String>>;

/// The destination's share groups as the sync sees them.
pub(super) trait ShareCoordinators: GroupCoordinators {
    /// Whether share groups are enabled here (`share.version` >= 1).
    fn share_enabled(&self) -> bool;
    /// Creates `__share_group_state` if it does not exist yet.
    fn ensure_share_state_topic(&self) -> Result<(), String>;
    /// The destination's start offset of each initialized partition of `group` (an `Err`
    /// for a partition whose state could not be read); `Err` when the group could not be
    /// described at all.
    fn share_starts(&self, group: &str) -> Result<Starts, String>;
    /// Sets `group`'s start offsets (creating the group Empty if missing); the error code
    /// of each partition or of the group it refused.
    fn share_alter(
        &self,
        group: &str,
        starts: &[(TopicPartition, i64)],
    ) -> Result<Vec<i16>, String>;
}

/// One share-offset sync round of mirror `def` over the partitions it mirrors (`mirrored`,
/// those not STOPPED); the number of groups written.
pub(super) fn sync_share_groups(
    def: &MirrorDefinition,
    source: &BTreeMap<String, BTreeMap<TopicPartition, i64>>,
    mirrored: &BTreeSet<TopicPartition>,
    c: &impl ShareCoordinators,
) -> Result<usize, String> {
    if source.values().all(BTreeMap::is_empty) {
        return Ok(0);
    }
    if !c.share_enabled() {
        tracing::debug!(mirror = %def.name, "share group offset sync waits for share.version=1");
        return Ok(0);
    }
    c.ensure_offsets_topic()?;
    c.ensure_share_state_topic()?;
    let active: BTreeSet<String> = c
        .list_groups()?
        .into_iter()
        .filter(|(_, state)| !matches!(state.as_str(), "Empty" | "Dead" | ""))
        .map(|(g, _)| g)
        .collect();
    let mut starts: BTreeMap<(String, TopicPartition), Result<i64, String>> = BTreeMap::new();
    let mut unreadable: BTreeSet<String> = BTreeSet::new();
    for g in source.keys().filter(|g| !active.contains(*g)) {
        match c.share_starts(g) {
            Ok(m) => starts.extend(m.into_iter().map(|(tp, s)| ((g.clone(), tp), s))),
            Err(e) => {
                tracing::debug!(group = %g, error = %e, "share group offsets unreadable here");
                unreadable.insert(g.clone());
            }
        }
    }
    let bounds: BTreeMap<TopicPartition, (i64, i64)> = mirrored
        .iter()
        .filter_map(|tp| c.bounds(tp).map(|b| (tp.clone(), b)))
        .collect();
    let plan = plan_group_sync(
        def,
        source,
        &active,
        |g, tp| match starts.get(&(g.to_owned(), tp.clone())) {
            Some(Ok(s)) => Some(*s),
            _ => None,
        },
        |tp| bounds.get(tp).copied(),
        |tp| mirrored.contains(tp),
    )
    .map_err(|e| e.to_string())?;
    let mut by_group: BTreeMap<String, Vec<(TopicPartition, i64)>> = BTreeMap::new();
    for w in plan {
        let unknown = matches!(starts.get(&(w.group.clone(), w.tp.clone())), Some(Err(_)));
        if unknown || unreadable.contains(&w.group) {
            continue;
        }
        by_group.entry(w.group).or_default().push((w.tp, w.offset));
    }
    let written = by_group.len();
    for (g, offs) in by_group {
        let refused = c.share_alter(&g, &offs)?;
        if refused.is_empty() {
            tracing::debug!(group = %g, partitions = offs.len(), "share group offsets synced");
        } else {
            tracing::info!(group = %g, codes = ?refused, "share group offset sync refused");
        }
    }
    Ok(written)
}

impl ShareCoordinators for super::BrokerHost {
    fn share_enabled(&self) -> bool {
        self.broker
            .metadata()
            .features
            .get("share.version")
            .is_some_and(|l| *l >= 1)
    }

    fn ensure_share_state_topic(&self) -> Result<(), String> {
        self.broker
            .ensure_internal_topic(SHARE_STATE_TOPIC)
            .map(|_| ())
            .map_err(|(code, msg)| format!("cannot create {SHARE_STATE_TOPIC}: {code} {msg}"))
    }

    fn share_starts(&self, group: &str) -> Result<Starts, String> {
        let req = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
            describe::DescribeShareGroupOffsetsRequestGroup::default()
                .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
                .with_topics(None),
        ]);
        let r = self.ask_coordinator(
            group,
            ApiKey::DescribeShareGroupOffsets,
            0,
            req,
            |r| match r {
                ResponseKind::DescribeShareGroupOffsets(r) => Some(r),
                _ => None,
            },
        )?;
        let g = r
            .groups
            .into_iter()
            .next()
            .ok_or("an empty DescribeShareGroupOffsets response")?;
        match g.error_code {
            0 => {}
            // Missing here: the sync creates it.
            c if c == ResponseError::GroupIdNotFound.code() => return Ok(BTreeMap::new()),
            c => return Err(format!("DescribeShareGroupOffsets of {group}: error {c}")),
        }
        let mut out = BTreeMap::new();
        for t in g.topics {
            for p in t.partitions {
                let tp = TopicPartition::new(t.topic_name.0.to_string(), p.partition_index);
                let start = match p.error_code {
                    0 => Ok(p.start_offset),
                    // The state lives on another node (answered so only in process): its
                    // share coordinator is asked.
                    code::NOT_COORDINATOR => {
                        self.share_summary(group, t.topic_id, p.partition_index)
                    }
                    c => Err(format!("error {c}")),
                };
                out.insert(tp, start);
            }
        }
        Ok(out)
    }

    fn share_alter(
        &self,
        group: &str,
        starts: &[(TopicPartition, i64)],
    ) -> Result<Vec<i16>, String> {
        let mut topics: BTreeMap<String, Vec<alter::AlterShareGroupOffsetsRequestPartition>> =
            BTreeMap::new();
        for (tp, o) in starts {
            topics.entry(tp.topic.clone()).or_default().push(
                alter::AlterShareGroupOffsetsRequestPartition::default()
                    .with_partition_index(tp.partition)
                    .with_start_offset(*o),
            );
        }
        let mut req = AlterShareGroupOffsetsRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
            .with_topics(
                topics
                    .into_iter()
                    .map(|(t, ps)| {
                        alter::AlterShareGroupOffsetsRequestTopic::default()
                            .with_topic_name(TopicName(StrBytes::from_string(t)))
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        req.unknown_tagged_fields
            .insert(kmirror_control::share::MIRROR_SYNC_TAG, bytes::Bytes::new());
        let r =
            self.ask_coordinator(group, ApiKey::AlterShareGroupOffsets, 0, req, |r| match r {
                ResponseKind::AlterShareGroupOffsets(r) => Some(r),
                _ => None,
            })?;
        if r.error_code != 0 {
            return Ok(vec![r.error_code]);
        }
        Ok(r.responses
            .iter()
            .flat_map(|t| t.partitions.iter())
            .map(|p| p.error_code)
            .filter(|c| *c != 0)
            .collect())
    }
}

impl super::BrokerHost {
    /// ReadShareGroupStateSummary of one partition of `group`, from the leader of its
    /// `__share_group_state` partition (another node).
    fn share_summary(&self, group: &str, topic: uuid::Uuid, partition: i32) -> Result<i64, String> {
        use kafka_protocol::messages::read_share_group_state_summary_request as rq;
        let meta = self.broker.metadata();
        let t = meta
            .topics
            .get(SHARE_STATE_TOPIC)
            .ok_or("no share state topic")?;
        let sp = kmirror_control::share::state_record::state_partition(
            group,
            topic,
            partition,
            t.partition_count(),
        );
        let leader = t
            .assignments
            .get(usize::try_from(sp).map_err(|e| e.to_string())?)
            .map(|a| a.leader)
            .filter(|l| *l >= 0)
            .ok_or("the share state partition has no leader")?;
        let req = ReadShareGroupStateSummaryRequest::default()
            .with_group_id(StrBytes::from_string(group.to_owned()))
            .with_topics(vec![rq::ReadStateSummaryData::default()
                .with_topic_id(topic)
                .with_partitions(vec![rq::PartitionData::default()
                    .with_partition(partition)
                    .with_leader_epoch(-1)])]);
        let r = self.ask_peer(leader, req, 0)?;
        let p = r
            .results
            .into_iter()
            .next()
            .and_then(|t| t.partitions.into_iter().next())
            .ok_or("an empty ReadShareGroupStateSummary response")?;
        match p.error_code {
            0 => Ok(p.start_offset),
            c => Err(format!("error {c}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A group's start offsets as written.
    type Write = (String, Vec<(TopicPartition, i64)>);

    /// Share groups in memory: each group's state and start offsets, partitions whose start
    /// cannot be read, each partition's log bounds, and the writes received.
    #[derive(Default)]
    struct MemShares {
        enabled: bool,
        states: BTreeMap<String, String>,
        starts: RefCell<BTreeMap<String, BTreeMap<TopicPartition, i64>>>,
        unreadable: BTreeSet<TopicPartition>,
        bounds: BTreeMap<TopicPartition, (i64, i64)>,
        writes: RefCell<Vec<Write>>,
    }

    impl GroupCoordinators for MemShares {
        fn ensure_offsets_topic(&self) -> Result<(), String> {
            Ok(())
        }
        fn list_groups(&self) -> Result<Vec<(String, String)>, String> {
            Ok(self
                .states
                .iter()
                .map(|(g, s)| (g.clone(), s.clone()))
                .collect())
        }
        fn committed(&self, _: &str) -> BTreeMap<TopicPartition, i64> {
            BTreeMap::new()
        }
        fn commit(&self, _: &str, _: &[(TopicPartition, i64)]) -> Result<Vec<i16>, String> {
            unreachable!("a share sync commits no consumer offsets")
        }
        fn bounds(&self, tp: &TopicPartition) -> Option<(i64, i64)> {
            self.bounds.get(tp).copied()
        }
    }

    impl ShareCoordinators for MemShares {
        fn share_enabled(&self) -> bool {
            self.enabled
        }
        fn ensure_share_state_topic(&self) -> Result<(), String> {
            Ok(())
        }
        fn share_starts(&self, group: &str) -> Result<Starts, String> {
            let mut out: Starts = self
                .starts
                .borrow()
                .get(group)
                .map(|m| m.iter().map(|(tp, s)| (tp.clone(), Ok(*s))).collect())
                .unwrap_or_default();
            for tp in &self.unreadable {
                out.insert(tp.clone(), Err("NOT_COORDINATOR".into()));
            }
            Ok(out)
        }
        fn share_alter(
            &self,
            group: &str,
            starts: &[(TopicPartition, i64)],
        ) -> Result<Vec<i16>, String> {
            self.writes
                .borrow_mut()
                .push((group.to_owned(), starts.to_vec()));
            let mut all = self.starts.borrow_mut();
            let g = all.entry(group.to_owned()).or_default();
            for (tp, o) in starts {
                g.insert(tp.clone(), *o);
            }
            Ok(Vec::new())
        }
    }

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("jobs", p)
    }

    fn def() -> MirrorDefinition {
        let s = BTreeMap::from([("bootstrap.servers".to_owned(), "src:9092".to_owned())]);
        MirrorDefinition::new("dr", s).unwrap()
    }

    #[test]
    fn idle_share_groups_get_the_clamped_source_start_and_active_or_unreadable_ones_nothing() {
        let c = MemShares {
            enabled: true,
            states: BTreeMap::from([("busy".into(), "Stable".into())]),
            unreadable: BTreeSet::from([tp(2)]),
            bounds: BTreeMap::from([(tp(0), (0, 500)), (tp(1), (100, 900)), (tp(2), (0, 900))]),
            ..Default::default()
        };
        let source = BTreeMap::from([
            (
                "idle".to_owned(),
                BTreeMap::from([(tp(0), 700), (tp(1), 50), (tp(2), 10), (tp(3), 5)]),
            ),
            ("busy".to_owned(), BTreeMap::from([(tp(0), 10)])),
        ]);
        let mirrored = BTreeSet::from([tp(0), tp(1), tp(2)]);
        assert_eq!(
            sync_share_groups(&def(), &source, &mirrored, &c).unwrap(),
            1
        );
        // Clamped to the log (700 past the end 500, 50 before the start 100); partition 2's
        // destination start unreadable: left alone; partition 3 not mirrored.
        assert_eq!(
            c.writes.borrow().as_slice(),
            [("idle".to_owned(), vec![(tp(0), 500), (tp(1), 100)])]
        );
        // The next round finds them equal: nothing written again.
        assert_eq!(
            sync_share_groups(&def(), &source, &mirrored, &c).unwrap(),
            0
        );
        assert_eq!(c.writes.borrow().len(), 1);
    }

    #[test]
    fn nothing_is_written_until_share_groups_are_enabled_here() {
        let c = MemShares {
            bounds: BTreeMap::from([(tp(0), (0, 500))]),
            ..Default::default()
        };
        let source = BTreeMap::from([("idle".to_owned(), BTreeMap::from([(tp(0), 7)]))]);
        let mirrored = BTreeSet::from([tp(0)]);
        assert_eq!(
            sync_share_groups(&def(), &source, &mirrored, &c).unwrap(),
            0
        );
        assert!(c.writes.borrow().is_empty());
    }
}
