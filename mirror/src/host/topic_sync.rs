//! Topic sync: each mirror's sync round (read from the source on an engine core), then
//! the planned topic creations, partition growth, config changes and source deletions.

use super::*;
use kmirror_control::metadata::ClusterMetadata;

impl Control {
    pub(super) fn count_sync_error(&self, mirror: &str, kind: SyncErrorKind) {
        self.host.manager.metrics().count_sync_error(mirror, kind);
    }

    pub(super) fn schedule_syncs(&mut self) {
        if !self.is_seat() {
            return;
        }
        let now = Instant::now();
        let defs: Vec<MirrorDefinition> = self.service.coordinator().mirrors().cloned().collect();
        let names: BTreeSet<String> = defs.iter().map(|d| d.name.clone()).collect();
        self.next_sync.retain(|k, _| names.contains(k));
        for def in defs {
            if self.in_flight.contains(&def.name) {
                continue;
            }
            if self.next_sync.get(&def.name).is_some_and(|t| *t > now) {
                continue;
            }
            let interval = Duration::from_millis(def.metadata_sync_interval_ms().max(100));
            self.next_sync.insert(def.name.clone(), now + interval);
            let group_interval = Duration::from_millis(
                def.setting_u64(
                    kmirror_control::mirror::definition::settings::GROUP_SYNC_INTERVAL_MS,
                    def.metadata_sync_interval_ms(),
                )
                .max(100),
            );
            let groups_due = self
                .next_group_sync
                .get(&def.name)
                .is_none_or(|t| *t <= now);
            if groups_due {
                self.next_group_sync
                    .insert(def.name.clone(), now + group_interval);
            }
            let Ok(filter) = def.topic_filter() else {
                continue;
            };
            let core = self.next_core % self.host.router.cores().max(1);
            self.next_core += 1;
            let tx = self.tx.clone();
            let name = def.name.clone();
            let bootstrap = def.source_bootstrap().to_owned();
            let security = ClientSecurity::from_properties(&def.client_settings());
            let client_id = format!("kmirror-{}-sync-{}", self.host.broker.node_id(), def.name);
            // Managed topics are asked for too, so a deselected-but-mirrored topic is not
            // mistaken for a deleted one.
            // Also the partitions led elsewhere in a cluster: the seat answers DescribeMirrors
            // for them from its replica's log end and this source end.
            let meta = self.host.broker.metadata();
            let idle: Vec<TopicPartition> = self
                .service
                .coordinator()
                .store()
                .partitions_of(&def.name)
                .filter(|(tp, e)| {
                    (e.state == PartitionState::Paused || !self.host.leads(&meta, tp))
                        && !self.host.manager.is_running(tp)
                })
                .map(|(tp, _)| tp.clone())
                .collect();
            let managed: BTreeSet<String> = self
                .service
                .coordinator()
                .store()
                .partitions_of(&def.name)
                .map(|(tp, _)| tp.topic.clone())
                .collect();
            let meta = self.host.broker.metadata();
            let managed_ids: BTreeMap<String, uuid::Uuid> = managed
                .iter()
                .filter_map(|t| meta.topics.get(t).map(|m| (t.clone(), m.id)))
                .collect();
            self.in_flight.insert(def.name.clone());
            let r = self
                .host
                .router
                .spawn_on_blocking(core, move || async move {
                    let mut src = KafkaSource::new(&bootstrap, client_id, Duration::from_secs(30))
                        .with_security(security);
                    let r = async {
                        let (_, topics) = src
                            .topics_snapshot(|t| filter.matches(t) || managed.contains(t))
                            .await
                            .map_err(|e| e.to_string())?;
                        // A mirrored topic absent from the list is looked up directly: absence
                        // alone never stops a mirror (see DeletionConfirmations).
                        let mut lookups = BTreeMap::new();
                        for (name, id) in &managed_ids {
                            if !topics.iter().any(|t| &t.name == name) {
                                lookups.insert(name.clone(), src.lookup_topic(name, *id).await);
                            }
                        }
                        let (mut groups_failed, mut acls_failed) = (false, false);
                        let groups = if groups_due {
                            match src.group_offsets(|_| true).await {
                                Ok(g) => Some(g),
                                Err(e) => {
                                    tracing::warn!(mirror = %name, error = %e, "group offsets");
                                    groups_failed = true;
                                    None
                                }
                            }
                        } else {
                            None
                        };
                        let share_groups = if groups_due {
                            match src.share_group_offsets(|_| true).await {
                                Ok(g) => g,
                                Err(e) => {
                                    tracing::warn!(mirror = %name, error = %e, "share group offsets");
                                    groups_failed = true;
                                    None
                                }
                            }
                        } else {
                            None
                        };
                        let acls = if groups_due {
                            match src.acls().await {
                                Ok(a) => a,
                                Err(e) => {
                                    tracing::warn!(mirror = %name, error = %e, "source ACLs");
                                    acls_failed = true;
                                    None
                                }
                            }
                        } else {
                            None
                        };
                        let mut quotas_failed = false;
                        let quotas = if groups_due {
                            match src.client_quotas().await {
                                Ok(q) => q,
                                Err(e) => {
                                    tracing::warn!(mirror = %name, error = %e, "source client quotas");
                                    quotas_failed = true;
                                    None
                                }
                            }
                        } else {
                            None
                        };
                        let mut idle_ends = Vec::new();
                        for tp in idle {
                            use crate::fetcher::Source;
                            let Ok(leader) = src.leader(&tp.topic, tp.partition).await else {
                                continue;
                            };
                            if let Ok(Ok(end)) = src
                                .list_offset(&leader, &tp.topic, tp.partition, leader.leader_epoch, -1)
                                .await
                            {
                                idle_ends.push((tp, end.get()));
                            }
                        }
                        Ok(SourceSnapshot {
                            topics,
                            groups,
                            share_groups,
                            idle_ends,
                            acls,
                            quotas,
                            quotas_failed,
                            lookups,
                            groups_failed,
                            acls_failed,
                        })
                    }
                    .await;
                    let _ = tx.send(Msg::Synced(name, r));
                });
            if let Err(e) = r {
                self.in_flight.remove(&def.name);
                tracing::warn!(mirror = %def.name, error = %e, "cannot schedule sync");
            }
        }
    }

    pub(super) fn apply_sync(&mut self, mirror: &str, snap: SourceSnapshot) {
        let Some(def) = self.service.coordinator().store().mirror(mirror).cloned() else {
            return;
        };
        self.host.idle_ends.extend(snap.idle_ends.iter().cloned());
        for (tp, end) in &snap.idle_ends {
            if let Some(p) = self.host.manager.metrics().progress(tp) {
                p.set_idle_source_end(*end);
            }
        }
        if snap.groups_failed {
            self.count_sync_error(mirror, SyncErrorKind::GroupOffsets);
        }
        if snap.acls_failed {
            self.count_sync_error(mirror, SyncErrorKind::Acls);
        }
        if snap.quotas_failed {
            self.count_sync_error(mirror, SyncErrorKind::Quotas);
        }
        let meta = self.host.broker.metadata();
        let local: Vec<LocalTopic> = meta
            .topics
            .values()
            .filter(|t| !t.internal)
            .map(|t| LocalTopic {
                name: t.name.clone(),
                topic_id: t.id,
                partitions: t.partition_count(),
                configs: t.configs.clone(),
            })
            .collect();
        // Configs kmirror cannot apply are left out so they are not re-planned every round.
        let source: Vec<SourceTopic> = snap
            .topics
            .iter()
            .map(|s| SourceTopic {
                configs: s
                    .configs
                    .iter()
                    .filter(|(k, v)| topic_config::validate_from_source(k, v).is_ok())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                ..s.clone()
            })
            .collect();
        let coord = self.service.coordinator();
        let plan = plan_metadata_sync(
            &def,
            &source,
            &local,
            |tp| coord.store().state_of(tp),
            |t| coord.owner_of(t).map(str::to_owned),
        );
        let actions = match plan {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(%mirror, error = %e, "metadata sync planning failed");
                self.count_sync_error(mirror, SyncErrorKind::TopicMetadata);
                return;
            }
        };
        for s in &snap.topics {
            self.deletions.seen(mirror, &s.name);
        }
        // Topics of this mirror blocked before the round stay blocked only if the round says
        // so again.
        let mut still_blocked = BTreeSet::new();
        for a in actions {
            let kind = match a {
                SyncAction::AlterConfigs { .. } => SyncErrorKind::Config,
                _ => SyncErrorKind::TopicMetadata,
            };
            let r = match a {
                SyncAction::SourceTopicMissing { name, topic_id } => {
                    let lookup = snap
                        .lookups
                        .get(&name)
                        .cloned()
                        .unwrap_or_else(|| SourceLookup::Failed("not looked up".into()));
                    match self.deletions.missing(mirror, &name, topic_id, &lookup) {
                        MissingVerdict::Deleted => self.stop_deleted_topic(mirror, &name),
                        MissingVerdict::Wait => {
                            tracing::info!(topic = %name, %mirror, ?lookup, "source topic missing from metadata; not confirmed deleted");
                            if self.blocked.contains_key(&name) {
                                still_blocked.insert(name);
                            }
                            Ok(())
                        }
                        MissingVerdict::Present => Ok(()),
                        MissingVerdict::Fail(reason) => {
                            still_blocked.insert(name.clone());
                            self.fail_topic(mirror, &name, reason)
                        }
                    }
                }
                SyncAction::SourceTopicIdChanged {
                    name,
                    mirrored_id,
                    source_id,
                } => {
                    still_blocked.insert(name.clone());
                    self.fail_topic(mirror, &name, id_changed_reason(mirrored_id, source_id))
                }
                a => self.apply_action(mirror, a),
            };
            if let Err(e) = r {
                tracing::warn!(%mirror, error = %e, "metadata sync step failed");
                self.count_sync_error(mirror, kind);
            }
        }
        let store = self.service.coordinator().store();
        let mine: BTreeSet<String> = store
            .partitions_of(mirror)
            .map(|(tp, _)| tp.topic.clone())
            .collect();
        self.blocked.retain(|t, reason| {
            let keep = !mine.contains(t) || still_blocked.contains(t);
            if !keep {
                tracing::info!(topic = %t, %mirror, %reason, "source topic visible again: mirroring resumes");
            }
            keep
        });
        if let Some(groups) = snap.groups {
            let mirrored: BTreeSet<TopicPartition> = self
                .service
                .coordinator()
                .store()
                .partitions_of(&def.name)
                .filter(|(_, e)| e.state != PartitionState::Stopped)
                .map(|(tp, _)| tp.clone())
                .collect();
            if let Err(e) = group_sync::sync_groups(&def, &groups, &mirrored, &self.host) {
                tracing::warn!(%mirror, error = %e, "group offset sync failed");
                self.count_sync_error(mirror, SyncErrorKind::GroupOffsets);
            }
            if let Some(shares) = &snap.share_groups {
                if let Err(e) =
                    super::share_sync::sync_share_groups(&def, shares, &mirrored, &self.host)
                {
                    tracing::warn!(%mirror, error = %e, "share group offset sync failed");
                    self.count_sync_error(mirror, SyncErrorKind::GroupOffsets);
                }
            }
        }
        let metrics = self.host.manager.metrics().clone();
        let shown = |c: &[kmirror_control::mirror::SyncClash]| -> Vec<String> {
            c.iter().map(super::clash_text).collect()
        };
        if let Some(acls) = snap.acls {
            match acl_sync::sync_acls(&def, &acls, &self.host) {
                Ok(done) => metrics.set_sync_clashes(mirror, "acls", shown(&done.clashes)),
                Err(e) => {
                    tracing::warn!(%mirror, error = %e, "ACL sync failed");
                    self.count_sync_error(mirror, SyncErrorKind::Acls);
                }
            }
        }
        if let Some(quotas) = snap.quotas {
            match quota_sync::sync_quotas(&def, &quotas, &self.host) {
                Ok(done) => metrics.set_sync_clashes(mirror, "quotas", shown(&done.clashes)),
                Err(e) => {
                    tracing::warn!(%mirror, error = %e, "client quota sync failed");
                    self.count_sync_error(mirror, SyncErrorKind::Quotas);
                }
            }
        }
    }

    pub(super) fn apply_action(&mut self, mirror: &str, a: SyncAction) -> Result<(), String> {
        let (svc, host) = (&mut self.service, &self.host);
        apply_action(host, svc.coordinator_mut(), &mut self.conflicts, mirror, a)
    }

    /// The source topic is gone (confirmed by [`DeletionConfirmations`]): its mirror
    /// partitions fail over to STOPPED and the topic becomes writable (never deleted here).
    pub(super) fn stop_deleted_topic(&mut self, mirror: &str, name: &str) -> Result<(), String> {
        tracing::warn!(topic = %name, %mirror, "source topic deleted (gone by name and id in consecutive rounds): stopping its mirror partitions");
        let (svc, host) = (&mut self.service, &mut self.host);
        svc.coordinator_mut()
            .source_topic_deleted(mirror, name, host)
            .map_err(|e| e.to_string())
    }

    /// FAILED with `reason` for every partition of `topic` this mirror still mirrors, and no
    /// fetcher until a sync round clears it. Never STOPPED: the topic stays read-only.
    pub(super) fn fail_topic(
        &mut self,
        mirror: &str,
        topic: &str,
        reason: String,
    ) -> Result<(), String> {
        if self.blocked.get(topic) != Some(&reason) {
            tracing::warn!(%topic, %mirror, %reason, "mirror topic FAILED");
        }
        self.blocked.insert(topic.to_owned(), reason.clone());
        let tps: Vec<TopicPartition> = self
            .service
            .coordinator()
            .store()
            .partitions_of(mirror)
            .filter(|(tp, e)| {
                tp.topic == topic
                    && matches!(
                        e.state,
                        PartitionState::Preparing
                            | PartitionState::Mirroring
                            | PartitionState::Failed
                    )
            })
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in tps {
            self.coordinator()
                .on_fetch_failed(&tp, reason.clone())
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// The destination's topics as the sync and the seat's BumpLeaderEpochs see them.
pub(super) trait Topics {
    /// The published metadata.
    fn metadata(&self) -> Arc<ClusterMetadata>;
    /// Proposes a topic change (the cluster's one mutation entry point) and pushes the
    /// result to the open partitions.
    fn propose(&self, cmd: MetadataCommand) -> Result<TopicMeta, String>;
    /// Replica lists for `count` new partitions from `start` (`rf` None: the default).
    fn placement(&self, start: i32, count: i32, rf: Option<i16>) -> Result<Vec<Vec<i32>>, String>;
    /// Opens fresh logs for partitions `from..` of `t` that this node hosts.
    fn open_partitions(&self, t: &TopicMeta, from: i32) -> Result<(), String>;
}

/// Applies one planned topic action of mirror `mirror`. Source deletions and id changes are
/// decided by the round itself (they need its lookups); a conflict is logged once per reason.
pub(super) fn apply_action(
    topics: &impl Topics,
    coordinator: &mut MirrorCoordinator,
    conflicts: &mut BTreeMap<String, String>,
    mirror: &str,
    a: SyncAction,
) -> Result<(), String> {
    let topic = |name: &str| topics.metadata().topics.get(name).cloned();
    match a {
        SyncAction::CreateTopic {
            name,
            topic_id,
            partitions,
            mut configs,
        } => {
            // The owner is kept in TopicMeta::mirror (hidden from DescribeConfigs).
            configs.remove(kmirror_control::mirror::MIRROR_NAME_CONFIG);
            // Values only a source may set skip the client validation of CreateTopics;
            // they were checked by the sync.
            let (source_configs, checked): (BTreeMap<_, _>, BTreeMap<_, _>) = configs
                .into_iter()
                .partition(|(k, v)| topic_config::validate(k, v).is_err());
            let t = topics.propose(MetadataCommand::CreateMirrorTopic {
                name: name.clone(),
                partitions,
                configs: checked,
                source_configs,
                id: topic_id,
                mirror: mirror.to_owned(),
                assignments: topics.placement(0, partitions, None)?,
            })?;
            topics.open_partitions(&t, 0)?;
            tracing::info!(topic = %name, %topic_id, partitions, %mirror, "mirror topic created");
            Ok(())
        }
        SyncAction::CreatePartitions { name, count } => {
            // The source's count sizes a vector below: hold it to the limit local topics
            // have (metadata's CreateTopics/CreatePartitions refuse more than 100,000).
            if !(1..=MAX_MIRROR_PARTITIONS).contains(&count) {
                return Err(format!(
                    "source topic {name} reports {count} partitions (limit {MAX_MIRROR_PARTITIONS})"
                ));
            }
            let current = topic(&name);
            let before = current.as_ref().map_or(0, |t| t.partition_count());
            // New partitions get as many replicas as the first one has.
            let rf = current
                .as_ref()
                .and_then(|t| t.assignments.first().map(|a| a.replicas.len() as i16));
            let assignments = if count > before {
                topics.placement(before, count - before, rf)?
            } else {
                Vec::new()
            };
            // Bypasses the client path (which refuses mirror topics).
            let t = topics.propose(MetadataCommand::GrowMirrorTopic {
                name: name.clone(),
                total: count,
                assignments,
            })?;
            topics.open_partitions(&t, before)?;
            tracing::info!(topic = %name, from = before, to = count, "mirror topic expanded");
            Ok(())
        }
        SyncAction::AlterConfigs { name, set, delete } => {
            topics.propose(MetadataCommand::SyncSourceConfigs { name, set, delete })?;
            Ok(())
        }
        SyncAction::Materialize(tp) => {
            coordinator
                .materialize_partition(mirror, &tp)
                .map_err(|e| e.to_string())?;
            // Read-only before the fetcher starts (reconcile does it too, idempotently).
            if topic(&tp.topic).is_some_and(|t| t.mirror.is_none()) {
                topics.propose(MetadataCommand::SetMirror {
                    name: tp.topic.clone(),
                    mirror: Some(mirror.to_owned()),
                })?;
            }
            Ok(())
        }
        SyncAction::SourceTopicMissing { name, .. }
        | SyncAction::SourceTopicIdChanged { name, .. } => Err(format!(
            "{name}: source topic state is handled by apply_sync"
        )),
        SyncAction::Conflict { name, reason } => {
            if conflicts.get(&name) != Some(&reason) {
                tracing::warn!(topic = %name, %mirror, %reason, "cannot mirror topic");
                conflicts.insert(name, reason);
            }
            Ok(())
        }
    }
}

impl Topics for BrokerHost {
    fn metadata(&self) -> Arc<ClusterMetadata> {
        self.broker.metadata()
    }

    fn propose(&self, cmd: MetadataCommand) -> Result<TopicMeta, String> {
        self.propose_topic(cmd)
    }

    fn placement(&self, start: i32, count: i32, rf: Option<i16>) -> Result<Vec<Vec<i32>>, String> {
        BrokerHost::placement(self, start, count, rf)
    }

    fn open_partitions(&self, t: &TopicMeta, from: i32) -> Result<(), String> {
        self.create_partitions_on_cores(t, from)
    }
}

/// An in-memory [`Topics`] for the unit tests of the sync and failover tasks.
#[cfg(test)]
pub(super) mod mem {
    use super::*;
    use std::cell::RefCell;

    /// Topics in memory; every proposal is recorded, and the topic commands these tasks
    /// send are applied to the metadata.
    pub(crate) struct MemTopics {
        pub(crate) meta: RefCell<ClusterMetadata>,
        pub(crate) proposed: RefCell<Vec<MetadataCommand>>,
        pub(crate) opened: RefCell<Vec<(String, i32)>>,
    }

    impl MemTopics {
        pub(crate) fn new(topics: Vec<TopicMeta>) -> Self {
            MemTopics {
                meta: RefCell::new(ClusterMetadata {
                    cluster_id: "test".into(),
                    version: 1,
                    topics: topics.into_iter().map(|t| (t.name.clone(), t)).collect(),
                    internal_topics: BTreeMap::new(),
                    broker_configs: Default::default(),
                    group_configs: Default::default(),
                    features: Default::default(),
                    brokers: BTreeMap::new(),
                }),
                proposed: RefCell::new(Vec::new()),
                opened: RefCell::new(Vec::new()),
            }
        }
    }

    pub(crate) fn topic(name: &str, id: u8, partitions: usize) -> TopicMeta {
        TopicMeta {
            name: name.into(),
            id: uuid::Uuid::from_bytes([id; 16]),
            leader_epochs: vec![0; partitions],
            configs: BTreeMap::new(),
            mirror: None,
            internal: false,
            assignments: Vec::new(),
        }
    }

    impl Topics for MemTopics {
        fn metadata(&self) -> Arc<ClusterMetadata> {
            Arc::new(self.meta.borrow().clone())
        }

        fn propose(&self, cmd: MetadataCommand) -> Result<TopicMeta, String> {
            self.proposed.borrow_mut().push(cmd.clone());
            let mut meta = self.meta.borrow_mut();
            let t = match cmd {
                MetadataCommand::CreateMirrorTopic {
                    name,
                    partitions,
                    configs,
                    id,
                    mirror,
                    ..
                } => {
                    let mut t = topic(&name, 0, partitions as usize);
                    (t.id, t.configs, t.mirror) = (id, configs, Some(mirror));
                    t
                }
                MetadataCommand::GrowMirrorTopic { name, total, .. } => {
                    let mut t = meta.topics.get(&name).cloned().ok_or("no such topic")?;
                    t.leader_epochs.resize(total as usize, 0);
                    t
                }
                MetadataCommand::SetMirror { name, mirror } => {
                    let mut t = meta.topics.get(&name).cloned().ok_or("no such topic")?;
                    t.mirror = mirror;
                    t
                }
                MetadataCommand::BumpLeaderEpoch {
                    name,
                    partition,
                    at_least,
                } => {
                    let mut t = meta.topics.get(&name).cloned().ok_or("no such topic")?;
                    let e = &mut t.leader_epochs[partition as usize];
                    *e = (*e).max(at_least);
                    t
                }
                other => return Err(format!("not modelled: {other:?}")),
            };
            meta.topics.insert(t.name.clone(), t.clone());
            Ok(t)
        }

        fn placement(&self, _: i32, _: i32, _: Option<i16>) -> Result<Vec<Vec<i32>>, String> {
            Ok(Vec::new())
        }

        fn open_partitions(&self, t: &TopicMeta, from: i32) -> Result<(), String> {
            let mut opened = self.opened.borrow_mut();
            opened.extend((from..t.partition_count()).map(|p| (t.name.clone(), p)));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::mem::{topic, MemTopics};
    use super::*;

    fn coordinator() -> MirrorCoordinator {
        MirrorCoordinator::new(MirrorStateStore::in_memory())
    }

    #[test]
    fn a_created_mirror_topic_keeps_source_only_configs_apart_and_opens_every_partition() {
        let topics = MemTopics::new(Vec::new());
        let configs = BTreeMap::from([
            (
                kmirror_control::mirror::MIRROR_NAME_CONFIG.to_owned(),
                "dr".to_owned(),
            ),
            ("retention.ms".to_owned(), "86400000".to_owned()),
            // A value CreateTopics refuses from a client but a source may carry.
            ("cleanup.policy".to_owned(), "Compact".to_owned()),
        ]);
        let a = SyncAction::CreateTopic {
            name: "orders".into(),
            topic_id: uuid::Uuid::from_bytes([7; 16]),
            partitions: 3,
            configs,
        };
        apply_action(&topics, &mut coordinator(), &mut BTreeMap::new(), "dr", a).unwrap();
        let proposed = topics.proposed.borrow();
        let MetadataCommand::CreateMirrorTopic {
            configs,
            source_configs,
            mirror,
            id,
            ..
        } = &proposed[0]
        else {
            panic!("{proposed:?}");
        };
        assert_eq!(mirror, "dr");
        assert_eq!(*id, uuid::Uuid::from_bytes([7; 16]));
        assert_eq!(
            configs,
            &BTreeMap::from([("retention.ms".to_owned(), "86400000".to_owned())])
        );
        assert_eq!(
            source_configs.get("cleanup.policy").map(String::as_str),
            Some("Compact")
        );
        assert!(!source_configs.contains_key(kmirror_control::mirror::MIRROR_NAME_CONFIG));
        assert_eq!(
            *topics.opened.borrow(),
            vec![
                ("orders".into(), 0),
                ("orders".into(), 1),
                ("orders".into(), 2)
            ]
        );
    }

    #[test]
    fn a_grown_source_topic_opens_only_the_new_partitions_and_an_absurd_count_is_refused() {
        let mut t = topic("orders", 7, 2);
        t.mirror = Some("dr".into());
        let topics = MemTopics::new(vec![t]);
        let grow = |count| SyncAction::CreatePartitions {
            name: "orders".into(),
            count,
        };
        let mut conflicts = BTreeMap::new();
        apply_action(&topics, &mut coordinator(), &mut conflicts, "dr", grow(4)).unwrap();
        assert_eq!(
            *topics.opened.borrow(),
            vec![("orders".into(), 2), ("orders".into(), 3)]
        );
        let before = topics.proposed.borrow().len();
        let err = apply_action(
            &topics,
            &mut coordinator(),
            &mut conflicts,
            "dr",
            grow(MAX_MIRROR_PARTITIONS + 1),
        )
        .unwrap_err();
        assert!(err.contains("limit"), "{err}");
        assert_eq!(topics.proposed.borrow().len(), before);
    }

    #[test]
    fn a_conflict_is_remembered_once_per_reason() {
        let topics = MemTopics::new(Vec::new());
        let mut conflicts = BTreeMap::new();
        let conflict = |reason: &str| SyncAction::Conflict {
            name: "orders".into(),
            reason: reason.into(),
        };
        for reason in [
            "local topic exists",
            "local topic exists",
            "owned by mirror b",
        ] {
            apply_action(
                &topics,
                &mut coordinator(),
                &mut conflicts,
                "dr",
                conflict(reason),
            )
            .unwrap();
        }
        assert_eq!(conflicts["orders"], "owned by mirror b");
        assert!(topics.proposed.borrow().is_empty());
    }
}
