//! [`BrokerHost`]: the broker as the mirror's control thread reaches it.

use super::*;

/// [`MirrorHost`] over the broker: metadata through the control thread, logs through the
/// owning cores (blocking calls: this runs on the mirror control thread only).
pub(crate) struct BrokerHost {
    pub(super) broker: Arc<dyn MirrorDeps>,
    pub(super) router: Router,
    pub(super) manager: Arc<FetcherManager>,
    /// Source LSO of partitions without a fetcher, from the sync rounds.
    pub(super) idle_ends: HashMap<TopicPartition, i64>,
    /// Source-deleted, never-mirrored offsets per partition: (sum, latest from, latest to).
    pub(super) lost: HashMap<TopicPartition, (i64, i64, i64)>,
    /// Fetchers asked to stop that had not exited when last checked.
    pub(super) stop_pending: BTreeSet<TopicPartition>,
    /// Per mirror: the last failed round's error and since when (epoch ms) rounds fail.
    pub(super) sync_errors: HashMap<String, (String, i64)>,
    /// Cluster: high watermarks of mirror partitions led by other nodes, asked from their
    /// leaders just before a DescribeMirrors is answered.
    pub(super) leader_hws: HashMap<TopicPartition, i64>,
}

impl BrokerHost {
    pub(super) fn on_partition<R: Send + 'static>(
        &self,
        tp: &TopicPartition,
        f: impl FnOnce(&mut kmirror_engine::Partition) -> Result<R, String> + Send + 'static,
    ) -> Result<R, String> {
        let tp2 = tp.clone();
        self.router
            .run_on_blocking(self.router.owner(tp), move |s| match s.partition(&tp2) {
                Ok(p) => f(p),
                Err(e) => Err(e.to_string()),
            })
            .map_err(|e| e.to_string())?
    }

    pub(super) fn topic(&self, name: &str) -> Option<TopicMeta> {
        self.broker.metadata().topics.get(name).cloned()
    }

    /// Cluster: what a consumer can read of `tp`, its high watermark on the leader. Here
    /// where this node leads; else the leader's answer to the last `refresh_leader_hws`, or
    /// this replica's own high watermark (what the leader last told it) when the leader
    /// could not be asked. None on one node, where the log end is readable.
    pub(super) fn readable_end(&self, tp: &TopicPartition) -> Option<i64> {
        if !self.leads(&self.broker.metadata(), tp) {
            if let Some(&hw) = self.leader_hws.get(tp) {
                return Some(hw);
            }
        }
        self.on_partition(tp, |p| Ok(p.log.high_watermark().0)).ok()
    }

    /// Cluster: asks each other leader of `partitions` for their high watermarks (ListOffsets
    /// LATEST, read_uncommitted, as a consumer would), one request per leader. A leader that
    /// does not answer leaves its partitions to `readable_end`'s fallback.
    pub(super) fn refresh_leader_hws(&mut self, partitions: &[TopicPartition]) {
        use kafka_protocol::messages::list_offsets_request::{
            ListOffsetsPartition, ListOffsetsTopic,
        };
        use kafka_protocol::messages::{BrokerId, ListOffsetsRequest};
        self.leader_hws.clear();
        let meta = self.broker.metadata();
        let me = self.broker.node_id();
        let mut by_leader: BTreeMap<i32, BTreeMap<String, Vec<i32>>> = BTreeMap::new();
        for tp in partitions {
            let Some(a) = meta
                .topics
                .get(&tp.topic)
                .and_then(|t| t.assignments.get(usize::try_from(tp.partition).ok()?))
            else {
                continue;
            };
            if a.leader >= 0 && a.leader != me {
                by_leader
                    .entry(a.leader)
                    .or_default()
                    .entry(tp.topic.clone())
                    .or_default()
                    .push(tp.partition);
            }
        }
        // v7: the version every Kafka 4.x and kmirror broker serves.
        const VERSION: i16 = 7;
        // The leader's inter-broker listener, authenticated as the broker itself.
        let ib = self.broker.inter_broker().clone();
        let mut asks = Vec::new();
        for (leader, topics) in by_leader {
            let Some(addr) = ib.peer_addr(&meta, leader) else {
                continue;
            };
            let req = ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_isolation_level(0)
                .with_topics(
                    topics
                        .iter()
                        .map(|(name, parts)| {
                            ListOffsetsTopic::default()
                                .with_name(StrBytes::from_string(name.clone()).into())
                                .with_partitions(
                                    parts
                                        .iter()
                                        .map(|&p| {
                                            ListOffsetsPartition::default()
                                                .with_partition_index(p)
                                                .with_timestamp(-1)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                );
            asks.push((addr, req));
        }
        if asks.is_empty() {
            return;
        }
        // The requests go out together from a core (async sockets); this thread waits for
        // their answers, each bounded by LEADER_HW_TIMEOUT.
        let (tx, rx) = flume::bounded(1);
        let spawned = self.router.spawn_on_blocking(0, move || async move {
            let asked: Vec<_> = asks
                .into_iter()
                .map(|(addr, req)| {
                    let ib = ib.clone();
                    glommio::spawn_local(async move {
                        let r = ib.request(&addr, &req, VERSION, LEADER_HW_TIMEOUT).await;
                        (addr, r)
                    })
                })
                .collect();
            let mut answers = Vec::with_capacity(asked.len());
            for a in asked {
                answers.push(a.await);
            }
            let _ = tx.send(answers);
        });
        if let Err(e) = spawned {
            tracing::debug!(error = %e, "cannot ask the partition leaders for their high watermarks");
            return;
        }
        let Ok(answers) = rx.recv_timeout(LEADER_HW_TIMEOUT + Duration::from_secs(1)) else {
            return;
        };
        for (addr, resp) in answers {
            match resp {
                Ok(r) => {
                    for t in r.topics {
                        for p in t.partitions {
                            if p.error_code == 0 && p.offset >= 0 {
                                self.leader_hws.insert(
                                    TopicPartition::new(t.name.to_string(), p.partition_index),
                                    p.offset,
                                );
                            }
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(%addr, error = %e, "cannot ask a partition leader for its high watermarks")
                }
            }
        }
    }

    /// Sends `req` to broker `node`'s inter-broker listener (authenticated as this broker)
    /// and returns its answer; the exchange runs on core 0, this thread waits for it.
    pub(super) fn ask_peer<R>(&self, node: i32, req: R, version: i16) -> Result<R::Response, String>
    where
        R: kafka_protocol::protocol::Request + Send + 'static,
        R::Response: Send + 'static,
    {
        let meta = self.broker.metadata();
        let ib = self.broker.inter_broker().clone();
        let addr = ib
            .peer_addr(&meta, node)
            .ok_or_else(|| format!("node {node} has no inter-broker endpoint"))?;
        let (tx, rx) = flume::bounded(1);
        self.router
            .spawn_on_blocking(0, move || async move {
                let _ = tx.send(ib.request(&addr, &req, version, PEER_TIMEOUT).await);
            })
            .map_err(|e| e.to_string())?;
        rx.recv_timeout(PEER_TIMEOUT + Duration::from_secs(1))
            .map_err(|_| format!("node {node} did not answer"))?
            .map_err(|e| e.to_string())
    }

    /// Pushes a topic's metadata (epoch, configs, mirror flag) to its open partitions.
    pub(super) fn refresh(&self, t: &TopicMeta) -> Result<(), String> {
        self.broker
            .refresh_partitions(&self.router, t)
            .map_err(|e| e.to_string())
    }

    /// Proposes a topic change (the cluster's one mutation entry point), then pushes the
    /// result to the open partitions.
    pub(super) fn propose_topic(&self, cmd: MetadataCommand) -> Result<TopicMeta, String> {
        let t = self.broker.propose_topic(cmd).map_err(|e| e.to_string())?;
        self.refresh(&t)?;
        Ok(t)
    }

    /// Replica lists for `count` new partitions from `start` in a cluster (`rf` None:
    /// `default.replication.factor`, as Kafka's mirror creates topics like CreateTopics);
    /// empty on a one-node broker.
    pub(super) fn placement(
        &self,
        start: i32,
        count: i32,
        rf: Option<i16>,
    ) -> Result<Vec<Vec<i32>>, String> {
        let default_rf = self.broker.default_replication_factor();
        kmirror_control::quorum::controller::propose_placement(
            &self.broker.metadata(),
            start,
            count.clamp(0, MAX_MIRROR_PARTITIONS),
            rf.unwrap_or(default_rf),
            default_rf,
        )
        .map_err(|e| e.to_string())
    }

    /// Whether this node runs the fetcher of `tp`: the partition's leader in a cluster
    /// (followers replicate it like any other partition), always on a one-node broker.
    pub(super) fn leads(
        &self,
        meta: &kmirror_control::metadata::ClusterMetadata,
        tp: &TopicPartition,
    ) -> bool {
        // A restarted node replays its own metadata log first: until it has heard from the
        // quorum leader and applied what is committed, the leaderships it sees may be old
        // ones, and a fetcher started on them would write beside the real leader.
        let q = self.broker.quorum_status();
        let current = q.leader.is_some() && q.applied_index >= q.commit_index;
        current
            && matches!(
                self.broker.role(meta, tp),
                Some(kmirror_net::cluster::Role::Leader { .. })
            )
    }

    /// Opens fresh logs for partitions `from..count` of `t` on their owning cores (in a
    /// cluster only those this node hosts; the replica reconciler opens them too).
    pub(super) fn create_partitions_on_cores(
        &self,
        t: &TopicMeta,
        from: i32,
    ) -> Result<(), String> {
        for p in from..t.partition_count() {
            if !self.broker.hosts(t, p) {
                continue;
            }
            let tp = TopicPartition::new(t.name.clone(), p);
            let tp2 = tp.clone();
            self.router
                .run_on_blocking(self.router.owner(&tp), move |s| {
                    s.create_partition(&tp2).map(|_| ())
                })
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("{tp}: {e}"))?;
        }
        Ok(())
    }

    /// Cluster mode: waits until the ISR has replicated `tp` to its log end (high watermark
    /// = log end), so a failover step never cuts records the followers have not fetched yet
    /// and a PID-reset marker is committed before STOPPED is. One node: nothing to wait for.
    pub(super) fn await_replicated(&self, tp: &TopicPartition) -> Result<(), String> {
        let until = Instant::now() + REPLICATED_WAIT;
        loop {
            let (hw, end) = self.on_partition(tp, |p| {
                Ok((p.log.high_watermark().0, p.log.log_end_offset().0))
            })?;
            if hw >= end {
                return Ok(());
            }
            if Instant::now() >= until {
                return Err(format!(
                    "{tp}: followers have not replicated to {end} (high watermark {hw}); retrying"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the broker-wide ceiling throttles `tp` here (its topic's
    /// `mirror.replication.throttled.replicas`, with this node as the mirror follower).
    pub(super) fn broker_throttles(&self, tp: &TopicPartition) -> bool {
        let t = self.topic(&tp.topic);
        crate::throttle::broker_throttles(
            t.as_ref()
                .and_then(|t| t.configs.get(crate::throttle::THROTTLED_REPLICAS))
                .map(String::as_str),
            tp.partition,
            self.broker.node_id(),
        )
    }

    pub(super) fn fetch_task(
        &self,
        mirror: &MirrorDefinition,
        tp: &TopicPartition,
        local_lme: Option<LeaderEpoch>,
        skip_prepare: bool,
    ) -> FetchTask {
        use kmirror_control::mirror::definition::settings::{
            FETCH_MAX_BYTES, FETCH_MAX_WAIT_MS, FETCH_PARTITION_MAX_BYTES, RETRY_BACKOFF_MAX_MS,
            RETRY_BACKOFF_MS, THROTTLED_RATE,
        };
        let setting = |key: &str| {
            mirror
                .settings
                .contains_key(key)
                .then(|| mirror.setting_u64(key, 0))
        };
        FetchTask {
            mirror: mirror.name.clone(),
            source_bootstrap: mirror.source_bootstrap().to_owned(),
            tp: tp.clone(),
            topic_id: self.topic(&tp.topic).map(|t| t.id).unwrap_or_default(),
            local_lme,
            skip_prepare,
            retry_backoff_ms: setting(RETRY_BACKOFF_MS),
            retry_backoff_max_ms: setting(RETRY_BACKOFF_MAX_MS),
            throttled_rate: mirror.setting_u64(THROTTLED_RATE, 0),
            priority: mirror.is_priority_topic(&tp.topic),
            broker_throttled: self.broker_throttles(tp),
            fetch_max_bytes: setting(FETCH_MAX_BYTES),
            fetch_partition_max_bytes: setting(FETCH_PARTITION_MAX_BYTES),
            fetch_max_wait_ms: setting(FETCH_MAX_WAIT_MS),
            security: ClientSecurity::from_properties(&mirror.client_settings()),
            start_timestamp: mirror.start_timestamp(&tp.topic),
        }
    }
}

impl MirrorHost for BrokerHost {
    fn local_partition_count(&self, topic: &str) -> Option<i32> {
        self.topic(topic).map(|t| t.partition_count())
    }

    fn start_fetcher(&mut self, mirror: &MirrorDefinition, tp: &TopicPartition) {
        if !self.leads(&self.broker.metadata(), tp) {
            // Its leader runs it (the reconcile there starts it).
            return;
        }
        let task = self.fetch_task(mirror, tp, None, true);
        if let Err(e) = self.manager.start(task) {
            tracing::warn!(%tp, error = %e, "cannot start mirror fetcher");
        }
    }

    fn stop_fetcher(&mut self, tp: &TopicPartition) -> Result<(), HostError> {
        // A fetcher already waited for once is only checked briefly on a retry: the control
        // thread serves every mirror request and must not block 30 s per retry.
        let wait = if self.stop_pending.contains(tp) {
            RETRY_STOP_WAIT
        } else {
            STOP_TIMEOUT
        };
        if self.manager.stop_and_wait(tp, wait) {
            self.stop_pending.remove(tp);
            return Ok(());
        }
        self.stop_pending.insert(tp.clone());
        tracing::error!(%tp, "mirror fetcher did not stop in time");
        Err(HostError::FetcherStillRunning {
            waited_secs: STOP_TIMEOUT.as_secs(),
        })
    }

    fn leader_epoch(&self, tp: &TopicPartition) -> Result<LeaderEpoch, HostError> {
        self.on_partition(tp, |p| Ok(p.leader_epoch))
            .map_err(HostError::Failed)
    }

    fn bump_leader_epoch(&mut self, tp: &TopicPartition) -> Result<LeaderEpoch, HostError> {
        // Above everything: the in-memory epoch, every epoch in the log, the durable one.
        let local = self
            .on_partition(tp, |p| {
                Ok(p.leader_epoch
                    .0
                    .max(p.log.latest_epoch().map_or(-1, |e| e.0)))
            })
            .map_err(HostError::Failed)?;
        let idx = tp.partition as usize;
        let durable = self
            .topic(&tp.topic)
            .and_then(|t| t.leader_epochs.get(idx).copied())
            .ok_or_else(|| HostError::UnknownPartition(tp.clone()))?;
        let new = local.max(durable) + 1;
        self.propose_topic(MetadataCommand::BumpLeaderEpoch {
            name: tp.topic.clone(),
            partition: tp.partition,
            at_least: new,
        })
        .map_err(HostError::Failed)?;
        self.on_partition(tp, move |p| {
            p.leader_epoch = p.leader_epoch.max(LeaderEpoch(new));
            Ok(LeaderEpoch(new))
        })
        .map_err(HostError::Failed)
    }

    fn truncate_to_lso(&mut self, tp: &TopicPartition) -> Result<Offset, HostError> {
        // The LSO is below the high watermark: mirrored records not yet on the followers
        // would be cut, so they are replicated first.
        self.await_replicated(tp).map_err(HostError::Failed)?;
        self.on_partition(tp, |p| {
            let lso = p.log.last_stable_offset();
            p.log.truncate_to(lso).map_err(|e| e.to_string())?;
            p.log.set_high_watermark(lso);
            p.log.flush().map_err(|e| e.to_string())?;
            Ok(lso)
        })
        .map_err(HostError::Failed)
    }

    fn ends_with_pid_reset(&self, tp: &TopicPartition) -> Result<bool, HostError> {
        let ends = self
            .on_partition(tp, |p| {
                let end = p.log.log_end_offset().0;
                if end <= p.log.log_start_offset().0 {
                    return Ok(false);
                }
                let r = p
                    .log
                    .read(
                        kmirror_types::Offset(end - 1),
                        1,
                        kmirror_types::Offset(end),
                    )
                    .map_err(|e| e.to_string())?;
                let mut b: &[u8] = &r.records;
                // The slice starts at the batch holding end-1: find the last batch in it.
                let mut last = None;
                while let Ok(h) = kmirror_log::batch::BatchHeader::parse(b) {
                    let size = h.total_size();
                    last = Some((h.is_control(), b[..size.min(b.len())].to_vec()));
                    if size >= b.len() {
                        break;
                    }
                    b = &b[size..];
                }
                Ok(match last {
                    Some((true, bytes)) => {
                        kmirror_log::batch::control_record(&bytes).is_some_and(|(t, _)| {
                            t == kmirror_log::batch::CONTROL_TYPE_MIRROR_PID_RESET
                        })
                    }
                    _ => false,
                })
            })
            .map_err(HostError::Failed)?;
        // A marker written by an earlier try counts once the followers have it.
        if ends {
            self.await_replicated(tp).map_err(HostError::Failed)?;
        }
        Ok(ends)
    }

    fn leadership_epoch(&self, tp: &TopicPartition) -> Option<LeaderEpoch> {
        match self.broker.role(&self.broker.metadata(), tp) {
            Some(kmirror_net::cluster::Role::Leader { epoch }) => Some(LeaderEpoch(epoch)),
            _ => None,
        }
    }

    fn runs_partition_steps(&self, tp: &TopicPartition) -> bool {
        self.leads(&self.broker.metadata(), tp)
    }

    fn write_pid_reset(&mut self, tp: &TopicPartition) -> Result<(), HostError> {
        self.on_partition(tp, |p| {
            p.append_control(
                ControlKind::MirrorPidReset,
                ProducerId(-1),
                -1,
                -1,
                kmirror_engine::now_ms(),
            )
            .map_err(|e| e.to_string())?;
            p.log.flush().map_err(|e| e.to_string())
        })
        .map_err(HostError::Failed)?;
        self.await_replicated(tp).map_err(HostError::Failed)
    }
}

impl MirrorLiveStatus for BrokerHost {
    fn sync_error(&self, mirror: &str) -> Option<String> {
        self.sync_errors.get(mirror).map(|(e, _)| e.clone())
    }

    fn source_unavailable_since(&self, mirror: &str) -> Option<i64> {
        self.sync_errors.get(mirror).map(|(_, since)| *since)
    }

    fn sync_clashes(&self, mirror: &str) -> Vec<String> {
        self.manager
            .metrics()
            .sync_clashes(mirror)
            .into_iter()
            .flat_map(|(kind, list)| list.into_iter().map(move |c| format!("{kind}: {c}")))
            .collect()
    }

    fn core(&self, tp: &TopicPartition) -> Option<usize> {
        Some(self.router.owner(tp))
    }

    fn live(&self, tp: &TopicPartition, now_ms: i64) -> Option<LivePartition> {
        // A fetcher's last status counts while it runs, or where this node leads (paused);
        // a replica that does not lead reports its own log.
        let leads = || self.leads(&self.broker.metadata(), tp);
        let status = self
            .manager
            .status(tp)
            .filter(|_| self.manager.is_running(tp) || leads());
        let st = match status {
            Some(st) => st,
            // No fetcher ran since this node started (paused across a restart): the local log
            // gives the destination end and the newest mirrored timestamp, the sync rounds the
            // source end, so lag and lag_ms come from data here too.
            None => {
                self.idle_ends.get(tp)?;
                let (end, newest) = self
                    .on_partition(tp, |p| {
                        let newest = p.log.max_timestamp_offset().map_or(-1, |(_, ts)| ts);
                        Ok((p.log.log_end_offset().0, newest))
                    })
                    .ok()?;
                crate::fetcher::FetcherStatus::from_local(end, newest)
            }
        };
        // In a cluster, lag is measured to what a consumer can read (the leader's high
        // watermark), not to the leader's log end.
        let st = match self.readable_end(tp) {
            Some(hw) => st.readable_to(hw),
            None => st,
        };
        let mut l = st.live(now_ms);
        if let Some(&(n, from, to)) = self.lost.get(tp) {
            (l.lost_records, l.lost_from, l.lost_to) = (n, from, to);
        }
        if self.manager.is_running(tp) {
            return Some(l);
        }
        // No fetcher (paused, stopped): the last status is frozen; the source may have moved.
        if let Some(&end) = self.idle_ends.get(tp) {
            if end > l.source_offset && l.destination_offset >= 0 {
                let moved = st.with_source_end(end);
                l.source_offset = end;
                l.lag = moved.lag();
                l.lag_ms = moved.lag_ms(now_ms);
            }
        }
        Some(l)
    }
}
