//! Group-offset sync: the source's committed offsets of groups that are not active on the
//! destination, clamped to the mirrored log (`kmirror_control::mirror::plan_group_sync`),
//! committed through each group's coordinator. The coordinators live on the leaders of
//! their `__consumer_offsets` partitions: a group coordinated on this node is asked in
//! process, another one over the inter-broker listener of the node that coordinates it (as
//! MirrorMaker 2 commits through each group's coordinator).
//!
//! The broker is reached through [`GroupCoordinators`] only, so the round is tested
//! without one.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::{
    ApiKey, ListGroupsRequest, OffsetCommitRequest, OffsetFetchRequest, RequestHeader, RequestKind,
    ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use kmirror_control::mirror::{plan_group_sync, MirrorDefinition};
use kmirror_types::TopicPartition;

const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The destination's group coordinators as the sync sees them.
pub(super) trait GroupCoordinators {
    /// Creates `__consumer_offsets` if it does not exist yet.
    fn ensure_offsets_topic(&self) -> Result<(), String>;
    /// Every group of the destination with its state (Empty, Stable, …). An error when a
    /// node could not be asked: its groups' states are unknown, so none may be written.
    fn list_groups(&self) -> Result<Vec<(String, String)>, String>;
    /// The offsets `group` has committed (none when its coordinator did not answer).
    fn committed(&self, group: &str) -> BTreeMap<TopicPartition, i64>;
    /// Commits `offsets` for `group` through its coordinator; the error code of each
    /// partition it refused.
    fn commit(&self, group: &str, offsets: &[(TopicPartition, i64)]) -> Result<Vec<i16>, String>;
    /// (log start, log end) of a local mirror partition.
    fn bounds(&self, tp: &TopicPartition) -> Option<(i64, i64)>;
}

/// One group-offset sync round of mirror `def` over the partitions it mirrors (`mirrored`,
/// those not STOPPED); the number of groups written.
pub(super) fn sync_groups(
    def: &MirrorDefinition,
    source: &BTreeMap<String, BTreeMap<TopicPartition, i64>>,
    mirrored: &BTreeSet<TopicPartition>,
    coordinators: &impl GroupCoordinators,
) -> Result<usize, String> {
    coordinators.ensure_offsets_topic()?;
    let active: BTreeSet<String> = coordinators
        .list_groups()?
        .into_iter()
        .filter(|(_, state)| !matches!(state.as_str(), "Empty" | "Dead" | ""))
        .map(|(g, _)| g)
        .collect();
    let mut committed: BTreeMap<(String, TopicPartition), i64> = BTreeMap::new();
    for g in source.keys() {
        for (tp, o) in coordinators.committed(g) {
            if o >= 0 {
                committed.insert((g.clone(), tp), o);
            }
        }
    }
    let bounds: BTreeMap<TopicPartition, (i64, i64)> = mirrored
        .iter()
        .filter_map(|tp| coordinators.bounds(tp).map(|b| (tp.clone(), b)))
        .collect();
    let commits = plan_group_sync(
        def,
        source,
        &active,
        |g, tp| committed.get(&(g.to_owned(), tp.clone())).copied(),
        |tp| bounds.get(tp).copied(),
        |tp| mirrored.contains(tp),
    )
    .map_err(|e| e.to_string())?;
    let mut by_group: BTreeMap<String, Vec<(TopicPartition, i64)>> = BTreeMap::new();
    for c in commits {
        by_group.entry(c.group).or_default().push((c.tp, c.offset));
    }
    let written = by_group.len();
    for (g, offs) in by_group {
        let refused = coordinators.commit(&g, &offs)?;
        if refused.is_empty() {
            tracing::debug!(group = %g, partitions = offs.len(), "group offsets synced");
        } else {
            tracing::info!(group = %g, codes = ?refused, "group offset sync refused");
        }
    }
    Ok(written)
}

/// The node that coordinates `group` (the leader of its `__consumer_offsets` partition), if
/// known.
fn group_coordinator(
    meta: &kmirror_control::metadata::ClusterMetadata,
    group: &str,
) -> Option<i32> {
    let t = meta.topics.get(OFFSETS_TOPIC)?;
    let p = kmirror_control::coordinator_partition::partition_for(group, t.partition_count());
    let a = t.assignments.get(usize::try_from(p).ok()?)?;
    (a.leader >= 0).then_some(a.leader)
}

/// The broker's coordinators: this node's through its groups service, the others' over
/// their inter-broker listeners (blocking: the mirror control thread only).
impl GroupCoordinators for super::BrokerHost {
    fn ensure_offsets_topic(&self) -> Result<(), String> {
        self.broker
            .ensure_internal_topic(OFFSETS_TOPIC)
            .map(|_| ())
            .map_err(|(code, msg)| format!("cannot create {OFFSETS_TOPIC}: {code} {msg}"))
    }

    fn list_groups(&self) -> Result<Vec<(String, String)>, String> {
        let me = self.broker.node_id();
        let mut listed = Vec::new();
        if let ResponseKind::ListGroups(r) = self.ask_local(
            ApiKey::ListGroups,
            4,
            RequestKind::ListGroups(ListGroupsRequest::default()),
        )? {
            listed.push(r);
        }
        let peers: Vec<i32> = self
            .broker
            .metadata()
            .brokers
            .keys()
            .copied()
            .filter(|id| *id != me)
            .collect();
        for n in peers {
            let r = self
                .ask_peer(n, ListGroupsRequest::default(), 4)
                .map_err(|e| format!("cannot list the groups of node {n}: {e}"))?;
            listed.push(r);
        }
        Ok(listed
            .into_iter()
            .flat_map(|r| r.groups)
            .map(|g| (g.group_id.0.to_string(), g.group_state.to_string()))
            .collect())
    }

    fn committed(&self, group: &str) -> BTreeMap<TopicPartition, i64> {
        let req = OffsetFetchRequest::default()
            .with_group_id(kafka_protocol::messages::GroupId(StrBytes::from_string(
                group.to_owned(),
            )))
            .with_topics(None);
        let r = self.ask_coordinator(group, ApiKey::OffsetFetch, 7, req, |r| match r {
            ResponseKind::OffsetFetch(r) => Some(r),
            _ => None,
        });
        let Ok(r) = r else {
            return BTreeMap::new();
        };
        r.topics
            .into_iter()
            .flat_map(|t| {
                let name = t.name.to_string();
                t.partitions.into_iter().map(move |p| {
                    (
                        TopicPartition::new(name.clone(), p.partition_index),
                        p.committed_offset,
                    )
                })
            })
            .collect()
    }

    fn commit(&self, group: &str, offsets: &[(TopicPartition, i64)]) -> Result<Vec<i16>, String> {
        use kafka_protocol::messages::offset_commit_request::{
            OffsetCommitRequestPartition, OffsetCommitRequestTopic,
        };
        let mut topics: BTreeMap<String, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
        for (tp, o) in offsets {
            topics.entry(tp.topic.clone()).or_default().push(
                OffsetCommitRequestPartition::default()
                    .with_partition_index(tp.partition)
                    .with_committed_offset(*o),
            );
        }
        let req = OffsetCommitRequest::default()
            .with_group_id(kafka_protocol::messages::GroupId(StrBytes::from_string(
                group.to_owned(),
            )))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(t, ps)| {
                        OffsetCommitRequestTopic::default()
                            .with_name(kafka_protocol::messages::TopicName(StrBytes::from_string(
                                t,
                            )))
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        let r = self.ask_coordinator(group, ApiKey::OffsetCommit, 8, req, |r| match r {
            ResponseKind::OffsetCommit(r) => Some(r),
            _ => None,
        })?;
        Ok(r.topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .filter(|c| *c != 0)
            .collect())
    }

    fn bounds(&self, tp: &TopicPartition) -> Option<(i64, i64)> {
        self.on_partition(tp, |p| {
            Ok((p.log.log_start_offset().0, p.log.log_end_offset().0))
        })
        .ok()
    }
}

impl super::BrokerHost {
    /// Another node that coordinates `group`; None when it is this node or unknown (then
    /// this node's coordinator answers, NOT_COORDINATOR if it is not the one).
    fn coordinator_of(&self, group: &str) -> Option<i32> {
        group_coordinator(&self.broker.metadata(), group).filter(|n| *n != self.broker.node_id())
    }

    /// `req` answered by `group`'s coordinator: another node over its inter-broker
    /// listener, or this node's groups service (`unwrap` takes the answer out of it).
    pub(super) fn ask_coordinator<R>(
        &self,
        group: &str,
        key: ApiKey,
        version: i16,
        req: R,
        unwrap: fn(ResponseKind) -> Option<R::Response>,
    ) -> Result<R::Response, String>
    where
        R: kafka_protocol::protocol::Request + Into<RequestKind> + Send + 'static,
        R::Response: Send + 'static,
    {
        match self.coordinator_of(group) {
            Some(n) => self.ask_peer(n, req, version),
            None => unwrap(self.ask_local(key, version, req.into())?)
                .ok_or_else(|| format!("unexpected {key:?} response")),
        }
    }

    /// A group request answered by this node's groups service.
    fn ask_local(
        &self,
        key: ApiKey,
        version: i16,
        req: RequestKind,
    ) -> Result<ResponseKind, String> {
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version);
        self.broker
            .group_request(key, version, &header, req)
            .ok_or_else(|| "this node runs no group coordinator".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Coordinators in memory: each group's state and committed offsets, each partition's
    /// log bounds, and the commits received.
    #[derive(Default)]
    struct MemGroups {
        states: BTreeMap<String, String>,
        offsets: RefCell<BTreeMap<String, BTreeMap<TopicPartition, i64>>>,
        bounds: BTreeMap<TopicPartition, (i64, i64)>,
        unreachable_node: bool,
        commits: RefCell<Vec<String>>,
    }

    impl GroupCoordinators for MemGroups {
        fn ensure_offsets_topic(&self) -> Result<(), String> {
            Ok(())
        }
        fn list_groups(&self) -> Result<Vec<(String, String)>, String> {
            if self.unreachable_node {
                return Err("cannot list the groups of node 2".into());
            }
            Ok(self
                .states
                .iter()
                .map(|(g, s)| (g.clone(), s.clone()))
                .collect())
        }
        fn committed(&self, group: &str) -> BTreeMap<TopicPartition, i64> {
            self.offsets
                .borrow()
                .get(group)
                .cloned()
                .unwrap_or_default()
        }
        fn commit(
            &self,
            group: &str,
            offsets: &[(TopicPartition, i64)],
        ) -> Result<Vec<i16>, String> {
            self.commits.borrow_mut().push(group.to_owned());
            let mut all = self.offsets.borrow_mut();
            let g = all.entry(group.to_owned()).or_default();
            for (tp, o) in offsets {
                g.insert(tp.clone(), *o);
            }
            Ok(Vec::new())
        }
        fn bounds(&self, tp: &TopicPartition) -> Option<(i64, i64)> {
            self.bounds.get(tp).copied()
        }
    }

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("orders", p)
    }

    fn def() -> MirrorDefinition {
        let s = BTreeMap::from([("bootstrap.servers".to_owned(), "src:9092".to_owned())]);
        MirrorDefinition::new("dr", s).unwrap()
    }

    #[test]
    fn group_sync_commits_idle_groups_clamped_to_the_mirrored_log_and_leaves_active_ones() {
        let coords = MemGroups {
            states: BTreeMap::from([
                ("billing".to_owned(), "Stable".to_owned()),
                ("audit".to_owned(), "Empty".to_owned()),
            ]),
            // The mirror has copied orders-0 up to 80 and orders-1 from 10 (log start) to 50.
            bounds: BTreeMap::from([(tp(0), (0, 80)), (tp(1), (10, 50))]),
            ..Default::default()
        };
        let source = BTreeMap::from([
            // Ahead of the mirror on orders-0, behind its log start on orders-1, and on a
            // partition the mirror does not mirror.
            (
                "audit".to_owned(),
                BTreeMap::from([(tp(0), 120), (tp(1), 3), (tp(7), 5)]),
            ),
            // Consuming on the destination: its own commits win.
            ("billing".to_owned(), BTreeMap::from([(tp(0), 60)])),
            ("fresh".to_owned(), BTreeMap::from([(tp(0), 40)])),
        ]);
        let mirrored = BTreeSet::from([tp(0), tp(1)]);
        assert_eq!(sync_groups(&def(), &source, &mirrored, &coords).unwrap(), 2);
        let offsets = coords.offsets.borrow().clone();
        assert_eq!(offsets["audit"], BTreeMap::from([(tp(0), 80), (tp(1), 10)]));
        assert_eq!(offsets["fresh"], BTreeMap::from([(tp(0), 40)]));
        assert!(!offsets.contains_key("billing"));
        // Nothing changed on the source: the next round writes nothing.
        coords.commits.borrow_mut().clear();
        assert_eq!(sync_groups(&def(), &source, &mirrored, &coords).unwrap(), 0);
        assert!(coords.commits.borrow().is_empty());
    }

    #[test]
    fn group_sync_writes_nothing_while_a_node_cannot_list_its_groups() {
        let coords = MemGroups {
            bounds: BTreeMap::from([(tp(0), (0, 80))]),
            unreachable_node: true,
            ..Default::default()
        };
        let source = BTreeMap::from([("audit".to_owned(), BTreeMap::from([(tp(0), 10)]))]);
        let mirrored = BTreeSet::from([tp(0)]);
        assert!(sync_groups(&def(), &source, &mirrored, &coords).is_err());
        assert!(coords.commits.borrow().is_empty());
    }
}
