//! The mirror coordinator: the user operations of the mirror APIs and the failover sequence,
//! applied to the durable store and to the broker through the small [`MirrorHost`] trait.
//!
//! Runtime-agnostic and synchronous: every method persists the state it is about to act on
//! first, then acts. The network-facing parts (source metadata sync, failback preparation with
//! LastMirroredEpochs / OffsetsForLeaderEpoch, fetchers) live in `net` and call back into
//! [`MirrorCoordinator::materialize_partition`], [`MirrorCoordinator::preparation_done`] and
//! [`MirrorCoordinator::on_fetch_failed`] / [`MirrorCoordinator::on_fetch_recovered`].
//!
//! Failover (seed 000), per partition, each step recorded in `__mirror_state` once done:
//! 1. `FetchersStopped`: stop the fetcher; the last mirrored epoch (the local leader epoch,
//!    kept >= the source's by the fetcher) is captured and persisted *before* the epoch bump,
//!    so a crash after the bump cannot lose it.
//! 2. `EpochBumped`: raise the local leader epoch above every epoch in the log.
//! 3. `TruncatedToLso`: truncate to the LSO (open source transactions are dropped).
//! 4. `LmePersisted`: the LME is durable (captured in step 1).
//! 5. `PidResetWritten`: append one MIRROR_PID_RESET control record; the host reports whether
//!    the log already ends with one, so a crash between the append and its record does not
//!    write a second.
//!
//! Then STOPPED: the partition becomes writable. Until then it is read-only.

use std::collections::BTreeMap;

use kmirror_types::{LeaderEpoch, Offset, TopicPartition};

use super::definition::MirrorDefinition;
use super::failpoint;
use super::state::{FailoverStep, PartitionState, StateRefusal, UserOp};
use super::store::{MirrorStateStore, PartitionEntry, RecoveryAction};
use super::MirrorError;

/// What the coordinator needs from the broker. All calls are local and synchronous (the
/// broker hops to the partition's owning core inside its implementation).
pub trait MirrorHost {
    /// Partition count of a local topic, None if it does not exist.
    fn local_partition_count(&self, topic: &str) -> Option<i32>;
    /// Start mirroring `tp` from the local log end (MIRRORING).
    fn start_fetcher(&mut self, mirror: &MirrorDefinition, tp: &TopicPartition);
    /// Stop the fetcher of `tp` if one runs (idempotent).
    /// [`HostError::FetcherStillRunning`] when it is still running after the host's timeout:
    /// the caller must not act as if it had stopped (a failover would otherwise leave two
    /// writers).
    fn stop_fetcher(&mut self, tp: &TopicPartition) -> Result<(), HostError>;
    /// Current local leader epoch of `tp`.
    fn leader_epoch(&self, tp: &TopicPartition) -> Result<LeaderEpoch, HostError>;
    /// Raise the local leader epoch above every epoch in the log; returns the new epoch.
    fn bump_leader_epoch(&mut self, tp: &TopicPartition) -> Result<LeaderEpoch, HostError>;
    /// Truncate the log to its last stable offset; returns the new log end.
    fn truncate_to_lso(&mut self, tp: &TopicPartition) -> Result<Offset, HostError>;
    /// Whether the last batch of the log is a MIRROR_PID_RESET control batch.
    fn ends_with_pid_reset(&self, tp: &TopicPartition) -> Result<bool, HostError>;
    /// Append a MIRROR_PID_RESET control record (expires all producer state).
    fn write_pid_reset(&mut self, tp: &TopicPartition) -> Result<(), HostError>;
    /// Cluster: the leader epoch this node leads `tp` at, which fences the records of its
    /// failover steps and fetcher events. None on one node (nothing to fence).
    fn leadership_epoch(&self, _tp: &TopicPartition) -> Option<LeaderEpoch> {
        None
    }
    /// Whether this node does the log work of `tp`'s failover steps. In a cluster only the
    /// partition's leader does (it sees the committed STOPPING and resumes the failover);
    /// elsewhere the partition is left STOPPING. One node: always.
    fn runs_partition_steps(&self, _tp: &TopicPartition) -> bool {
        true
    }
}

/// Why a [`MirrorHost`] call failed.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// The fetcher still runs after the host waited this long: the failover must wait.
    #[error("mirror fetcher did not stop within {waited_secs} s")]
    FetcherStillRunning { waited_secs: u64 },
    /// The topic or partition is not on this node.
    #[error("{0} does not exist")]
    UnknownPartition(TopicPartition),
    /// The partition's log, its replication or a metadata proposal failed (disk, engine
    /// shutting down, followers not caught up, no quorum leader).
    #[error("{0}")]
    Failed(String),
}

/// Why a per-topic operation failed.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum TopicOpError {
    #[error(transparent)]
    Mirror(#[from] MirrorError),
    #[error("{topic}: refused in state {state}: {refusal:?}")]
    Refused {
        topic: String,
        state: PartitionState,
        refusal: StateRefusal,
    },
    #[error("topic '{0}' does not exist on this cluster")]
    UnknownTopic(String),
    #[error("failover step failed for {tp}: {reason}")]
    Host { tp: TopicPartition, reason: String },
}

/// Per-topic outcomes of a multi-topic operation, in request order.
pub type TopicResults = Vec<(String, Result<(), TopicOpError>)>;

/// One partition as DescribeMirrors reports it (live offsets come from the fetchers).
#[derive(Debug, Clone, PartialEq)]
pub struct DescribedPartition {
    pub topic: String,
    pub partition: i32,
    pub state: PartitionState,
    pub last_mirrored_epoch: Option<i32>,
    pub reason: Option<String>,
}

/// The coordinator: owns the store, borrows the host per call.
#[derive(Debug)]
pub struct MirrorCoordinator {
    store: MirrorStateStore,
}

impl MirrorCoordinator {
    pub fn new(store: MirrorStateStore) -> Self {
        MirrorCoordinator { store }
    }

    pub fn store(&self) -> &MirrorStateStore {
        &self.store
    }

    /// WriteMirrorStates (inter-broker): persist a partition's state and last mirrored
    /// offset as the caller reports them (see [`MirrorStateStore::write_state`]).
    pub fn write_state(
        &mut self,
        tp: &TopicPartition,
        mirror: &str,
        state: PartitionState,
        last_mirrored_offset: i64,
    ) -> Result<(), MirrorError> {
        self.store
            .write_state(tp, mirror, state, last_mirrored_offset)
    }

    /// WriteMirrorStates RemovedTopics: see [`MirrorStateStore::remove_topic_states`].
    pub fn remove_topic_states(&mut self, mirror: &str, topic: &str) -> Result<(), MirrorError> {
        self.store.remove_topic_states(mirror, topic)
    }

    /// Whether writes to `tp` must be refused with READ_ONLY_TOPIC.
    pub fn is_read_only(&self, tp: &TopicPartition) -> bool {
        self.store.state_of(tp).is_read_only()
    }

    /// Whether a topic is (or is being) mirrored: any partition read-only.
    pub fn topic_is_read_only(&self, topic: &str) -> bool {
        self.store
            .partitions()
            .any(|(tp, e)| tp.topic == topic && e.state.is_read_only())
    }

    /// Mirror owning a topic right now (a partition not STOPPED), if any.
    pub fn owner_of(&self, topic: &str) -> Option<&str> {
        self.store
            .partitions()
            .find(|(tp, e)| tp.topic == topic && e.state != PartitionState::Stopped)
            .map(|(_, e)| e.mirror.as_str())
    }

    // ---- mirrors ---------------------------------------------------------------------------

    pub fn create_mirror(
        &mut self,
        name: &str,
        settings: BTreeMap<String, String>,
    ) -> Result<(), MirrorError> {
        let def = MirrorDefinition::new(name, settings)?;
        self.store.create_mirror(def)
    }

    /// Changes a mirror's settings: `changes` are merged in (None removes a key); the result
    /// must pass the same checks as at creation. Topics and patterns stay.
    pub fn alter_mirror(
        &mut self,
        name: &str,
        changes: BTreeMap<String, Option<String>>,
    ) -> Result<(), MirrorError> {
        let mut def = self
            .store
            .mirror(name)
            .cloned()
            .ok_or_else(|| MirrorError::UnknownMirror(name.to_owned()))?;
        let mut settings = def.settings.clone();
        for (k, v) in changes {
            match v {
                Some(v) => settings.insert(k, v),
                None => settings.remove(&k),
            };
        }
        MirrorDefinition::new(name, settings.clone())?;
        def.settings = settings;
        self.store.update_mirror(def)
    }

    pub fn delete_mirror(&mut self, name: &str) -> Result<(), MirrorError> {
        self.store.delete_mirror(name)
    }

    pub fn mirrors(&self) -> impl Iterator<Item = &MirrorDefinition> {
        self.store.mirrors()
    }

    /// Distinct topics a mirror currently manages (partitions not STOPPED) plus named topics
    /// not materialized yet.
    pub fn topic_count(&self, mirror: &str) -> usize {
        let mut topics: Vec<&str> = self
            .store
            .partitions_of(mirror)
            .filter(|(_, e)| e.state != PartitionState::Stopped)
            .map(|(tp, _)| tp.topic.as_str())
            .collect();
        if let Some(d) = self.store.mirror(mirror) {
            topics.extend(d.topics.iter().map(String::as_str));
        }
        topics.sort_unstable();
        topics.dedup();
        topics.len()
    }

    // ---- AddTopicsToMirror -----------------------------------------------------------------

    /// Record topics (by name) and patterns on the mirror. Topics already local and STOPPED
    /// go to PREPARING now (failback / re-add); the metadata sync creates the others and calls
    /// [`Self::materialize_partition`]. A topic owned by a mirror is refused.
    pub fn add_topics(
        &mut self,
        mirror: &str,
        topics: &[String],
        include: &[String],
        exclude: &[String],
        host: &mut impl MirrorHost,
    ) -> Result<TopicResults, MirrorError> {
        let mut def = self
            .store
            .mirror(mirror)
            .cloned()
            .ok_or_else(|| MirrorError::UnknownMirror(mirror.to_owned()))?;
        // Validate the new patterns before recording anything.
        super::definition::TopicFilter::new(&[], include, exclude)?;
        let mut results = Vec::new();
        let mut accepted = Vec::new();
        for t in topics {
            if self.owner_of(t).is_some() {
                let state = self
                    .store
                    .partitions()
                    .find(|(tp, _)| &tp.topic == t)
                    .map_or(PartitionState::Unknown, |(_, e)| e.state);
                results.push((
                    t.clone(),
                    Err(TopicOpError::Refused {
                        topic: t.clone(),
                        state,
                        refusal: StateRefusal::AlreadyInMirror,
                    }),
                ));
                continue;
            }
            accepted.push(t.clone());
            results.push((t.clone(), Ok(())));
        }
        for t in &accepted {
            if !def.topics.contains(t) {
                def.topics.push(t.clone());
            }
        }
        for p in include {
            if !def.include_patterns.contains(p) {
                def.include_patterns.push(p.clone());
            }
        }
        for p in exclude {
            if !def.exclude_patterns.contains(p) {
                def.exclude_patterns.push(p.clone());
            }
        }
        self.store.update_mirror(def)?;
        // Local topics stopped by an earlier failover start preparing now (failback / re-add).
        // Never-mirrored local topics (UNKNOWN) wait for the metadata sync, which checks that
        // the local topic id is the source's before mirroring into it.
        for (t, r) in results.iter_mut() {
            if r.is_err() {
                continue;
            }
            if let Some(n) = host.local_partition_count(t) {
                for p in 0..n {
                    let tp = TopicPartition::new(t.clone(), p);
                    if self.store.state_of(&tp) != PartitionState::Stopped {
                        continue;
                    }
                    if let Err(e) = self.materialize_partition(mirror, &tp) {
                        *r = Err(e.into());
                        break;
                    }
                }
            }
        }
        Ok(results)
    }

    /// A partition of a topic the mirror wants now exists locally (created by the metadata
    /// sync with the source's id, or already there): UNKNOWN/STOPPED -> PREPARING. No-op if
    /// the partition is already in this mirror.
    pub fn materialize_partition(
        &mut self,
        mirror: &str,
        tp: &TopicPartition,
    ) -> Result<(), MirrorError> {
        match self.store.state_of(tp) {
            PartitionState::Unknown | PartitionState::Stopped => {
                self.store
                    .transition(tp, mirror, PartitionState::Preparing, None)?;
                Ok(())
            }
            _ => match self.store.partition(tp) {
                Some(e) if e.mirror == mirror => Ok(()),
                _ => Err(MirrorError::TopicNotInMirror {
                    topic: tp.topic.clone(),
                    mirror: mirror.to_owned(),
                }),
            },
        }
    }

    /// PREPARING is complete (truncation for failback done): MIRRORING, then start the fetcher.
    pub fn preparation_done(
        &mut self,
        tp: &TopicPartition,
        host: &mut impl MirrorHost,
    ) -> Result<(), MirrorError> {
        let e = self.entry(tp)?;
        let def = self
            .store
            .mirror(&e.mirror)
            .cloned()
            .ok_or_else(|| MirrorError::UnknownMirror(e.mirror.clone()))?;
        self.store
            .transition(tp, &e.mirror, PartitionState::Mirroring, None)?;
        host.start_fetcher(&def, tp);
        Ok(())
    }

    /// The fetcher reported a bad batch or persistent error: FAILED with the reason. The
    /// fetcher keeps retrying with backoff.
    pub fn on_fetch_failed(
        &mut self,
        tp: &TopicPartition,
        reason: String,
    ) -> Result<(), MirrorError> {
        let e = self.entry(tp)?;
        match e.state {
            PartitionState::Failed if e.reason.as_deref() == Some(reason.as_str()) => Ok(()),
            PartitionState::Failed => {
                // Same state, newer reason: rewrite the entry through a legal path.
                self.store
                    .transition(tp, &e.mirror, PartitionState::Mirroring, None)?;
                self.store
                    .transition(tp, &e.mirror, PartitionState::Failed, Some(reason))?;
                Ok(())
            }
            PartitionState::Mirroring | PartitionState::Preparing => {
                self.store
                    .transition(tp, &e.mirror, PartitionState::Failed, Some(reason))?;
                Ok(())
            }
            // A late report after pause/stop is ignored.
            _ => Ok(()),
        }
    }

    /// A FAILED partition appended again: back to MIRRORING.
    pub fn on_fetch_recovered(&mut self, tp: &TopicPartition) -> Result<(), MirrorError> {
        let e = self.entry(tp)?;
        if e.state == PartitionState::Failed {
            self.store
                .transition(tp, &e.mirror, PartitionState::Mirroring, None)?;
        }
        Ok(())
    }

    fn entry(&self, tp: &TopicPartition) -> Result<PartitionEntry, MirrorError> {
        self.store
            .partition(tp)
            .cloned()
            .ok_or_else(|| MirrorError::UnknownPartition(tp.clone()))
    }

    fn partitions_of_topic(&self, topic: &str) -> Vec<(TopicPartition, PartitionEntry)> {
        self.store
            .partitions()
            .filter(|(tp, _)| tp.topic == topic)
            .map(|(tp, e)| (tp.clone(), e.clone()))
            .collect()
    }

    /// Check that `topic` is a topic of `mirror` for Remove/Pause/Resume.
    fn check_topic(
        &self,
        mirror: &str,
        topic: &str,
        host: &impl MirrorHost,
    ) -> Result<Vec<(TopicPartition, PartitionEntry)>, TopicOpError> {
        if self.store.mirror(mirror).is_none() {
            return Err(MirrorError::UnknownMirror(mirror.to_owned()).into());
        }
        let parts = self.partitions_of_topic(topic);
        if parts.is_empty() {
            if host.local_partition_count(topic).is_none() {
                return Err(TopicOpError::UnknownTopic(topic.to_owned()));
            }
            return Err(MirrorError::TopicNotInMirror {
                topic: topic.to_owned(),
                mirror: mirror.to_owned(),
            }
            .into());
        }
        if parts.iter().any(|(_, e)| e.mirror != mirror) {
            return Err(MirrorError::TopicNotInMirror {
                topic: topic.to_owned(),
                mirror: mirror.to_owned(),
            }
            .into());
        }
        Ok(parts)
    }

    fn apply_user_op(
        &mut self,
        mirror: &str,
        topic: &str,
        op: UserOp,
        host: &mut impl MirrorHost,
    ) -> Result<Vec<TopicPartition>, TopicOpError> {
        let parts = self.check_topic(mirror, topic, host)?;
        // Validate every partition first so a topic is never left half-changed by a refusal.
        let mut plan = Vec::new();
        for (tp, e) in &parts {
            match op.target(e.state) {
                Ok(t) => plan.push((tp.clone(), e.state, t)),
                Err(refusal) => {
                    return Err(TopicOpError::Refused {
                        topic: topic.to_owned(),
                        state: e.state,
                        refusal,
                    })
                }
            }
        }
        let def = self
            .store
            .mirror(mirror)
            .cloned()
            .ok_or_else(|| MirrorError::UnknownMirror(mirror.to_owned()))?;
        let mut changed = Vec::new();
        for (tp, from, to) in plan {
            if from == to {
                continue;
            }
            // Persist first, then act.
            self.store.transition(&tp, mirror, to, None)?;
            match to {
                PartitionState::Paused => {
                    // A fetcher slow to stop is stopped again by the host's reconcile.
                    if let Err(e) = host.stop_fetcher(&tp) {
                        tracing::warn!(%tp, error = %e, "pause: fetcher not stopped yet");
                    }
                }
                PartitionState::Mirroring => host.start_fetcher(&def, &tp),
                _ => {}
            }
            changed.push(tp);
        }
        Ok(changed)
    }

    /// PauseMirrorTopics.
    pub fn pause_topics(
        &mut self,
        mirror: &str,
        topics: &[String],
        host: &mut impl MirrorHost,
    ) -> TopicResults {
        topics
            .iter()
            .map(|t| {
                (
                    t.clone(),
                    self.apply_user_op(mirror, t, UserOp::Pause, host)
                        .map(|_| ()),
                )
            })
            .collect()
    }

    /// ResumeMirrorTopics.
    pub fn resume_topics(
        &mut self,
        mirror: &str,
        topics: &[String],
        host: &mut impl MirrorHost,
    ) -> TopicResults {
        topics
            .iter()
            .map(|t| {
                (
                    t.clone(),
                    self.apply_user_op(mirror, t, UserOp::Resume, host)
                        .map(|_| ()),
                )
            })
            .collect()
    }

    /// RemoveTopicsFromMirror (failover): STOPPING is persisted for every partition of the
    /// topic, the topic leaves the mirror's selection (so the sync loop does not re-add it),
    /// then each partition's failover runs to STOPPED. A failover interrupted by a host error
    /// stays STOPPING and is resumed by [`Self::recover`] or a repeated remove.
    pub fn remove_topics(
        &mut self,
        mirror: &str,
        topics: &[String],
        host: &mut impl MirrorHost,
    ) -> TopicResults {
        let mut out = Vec::new();
        for t in topics {
            let r = self
                .apply_user_op(mirror, t, UserOp::Remove, host)
                .and_then(|_| self.deselect_topic(mirror, t).map_err(Into::into))
                .and_then(|_| {
                    failpoint::hit("after_state_stopping");
                    for (tp, e) in self.partitions_of_topic(t) {
                        if e.state == PartitionState::Stopping {
                            self.run_failover(&tp, host)?;
                        }
                    }
                    Ok(())
                });
            out.push((t.clone(), r));
        }
        out
    }

    /// Records where the mirror logs of `keys` (topic names or include patterns about to be
    /// added) start: a ListOffsets timestamp ([`super::definition::START_LATEST`] or epoch
    /// ms; [`super::definition::START_EARLIEST`] removes the entry). Recorded before the
    /// topics are added, so no fetcher of theirs starts without it.
    pub fn set_start_positions(
        &mut self,
        mirror: &str,
        keys: &[String],
        timestamp: i64,
    ) -> Result<(), MirrorError> {
        if timestamp < super::definition::START_EARLIEST {
            return Err(MirrorError::InvalidSetting {
                key: "start".to_owned(),
                reason: format!("{timestamp} is not earliest (-2), latest (-1) or a timestamp"),
            });
        }
        self.edit_definition(mirror, |def| {
            for k in keys {
                if timestamp == super::definition::START_EARLIEST {
                    def.start_positions.remove(k);
                } else {
                    def.start_positions.insert(k.clone(), timestamp);
                }
            }
        })
    }

    /// Changes mirror `mirror`'s definition with `edit`, recording it only if it changed.
    fn edit_definition(
        &mut self,
        mirror: &str,
        edit: impl FnOnce(&mut MirrorDefinition),
    ) -> Result<(), MirrorError> {
        let mut def = self
            .store
            .mirror(mirror)
            .cloned()
            .ok_or_else(|| MirrorError::UnknownMirror(mirror.to_owned()))?;
        let before = def.clone();
        edit(&mut def);
        if def != before {
            self.store.update_mirror(def)?;
        }
        Ok(())
    }

    /// RemoveTopicsFromMirror with patterns (`kmirror mirror remove NAME --all` sends `.*`,
    /// `--topic-regex R` sends R): every topic of the mirror not yet failed over whose name a
    /// pattern matches (full match) fails over, as [`Self::remove_topics`] does. First the
    /// patterns leave the mirror's include list and join its exclude list, so no source topic
    /// they match joins the mirror afterwards (after `--all`, none). The selection change is
    /// recorded before any failover starts, and a repeated request resumes the failovers.
    pub fn remove_topic_patterns(
        &mut self,
        mirror: &str,
        patterns: &[String],
        host: &mut impl MirrorHost,
    ) -> Result<TopicResults, MirrorError> {
        let matcher = super::definition::TopicFilter::new(&[], patterns, &[])?;
        self.edit_definition(mirror, |def| {
            def.include_patterns.retain(|p| !patterns.contains(p));
            for p in patterns {
                if !def.exclude_patterns.contains(p) {
                    def.exclude_patterns.push(p.clone());
                }
            }
        })?;
        let targets: Vec<String> = self
            .store
            .active_topics(mirror)
            .into_iter()
            .filter(|t| matcher.matches_any_name(t))
            .collect();
        Ok(self.remove_topics(mirror, &targets, host))
    }

    /// Take a topic out of the mirror's selection: drop it from the named topics and exclude
    /// it by exact name so include patterns stop matching it.
    fn deselect_topic(&mut self, mirror: &str, topic: &str) -> Result<(), MirrorError> {
        if self.store.mirror(mirror).is_none() {
            return Ok(());
        }
        self.edit_definition(mirror, |def| {
            def.topics.retain(|x| x != topic);
            let exact = regex::escape(topic);
            let matched_by_pattern = super::definition::TopicFilter::new(
                &[],
                &def.include_patterns,
                &def.exclude_patterns,
            )
            .map(|f| f.matches(topic))
            .unwrap_or(false);
            if matched_by_pattern && !def.exclude_patterns.contains(&exact) {
                def.exclude_patterns.push(exact);
            }
        })
    }

    /// Run (or resume) the failover of one STOPPING partition to STOPPED. Idempotent: each
    /// completed step is recorded and skipped on a rerun.
    pub fn run_failover(
        &mut self,
        tp: &TopicPartition,
        host: &mut impl MirrorHost,
    ) -> Result<(), TopicOpError> {
        // The steps are the partition leader's: fenced by the epoch it leads at.
        self.store
            .set_step_fence(tp, host.leadership_epoch(tp).map(LeaderEpoch::get));
        let r = self.run_failover_steps(tp, host);
        self.store.clear_step_fence();
        r
    }

    fn run_failover_steps(
        &mut self,
        tp: &TopicPartition,
        host: &mut impl MirrorHost,
    ) -> Result<(), TopicOpError> {
        let host_err = |e: HostError| TopicOpError::Host {
            tp: tp.clone(),
            reason: e.to_string(),
        };
        if !host.runs_partition_steps(tp) {
            return Ok(());
        }
        loop {
            let e = self.entry(tp)?;
            if e.state != PartitionState::Stopping {
                return Ok(());
            }
            let next = match e.failover_done {
                None => Some(FailoverStep::FetchersStopped),
                Some(s) => s.next(),
            };
            match next {
                Some(FailoverStep::FetchersStopped) => {
                    // Not recorded until the fetcher is gone: the partition stays STOPPING
                    // (read-only) with the reason, and the failover is retried.
                    if let Err(e) = host.stop_fetcher(tp) {
                        let reason = format!("failover waiting: {e}; retrying");
                        self.store.set_reason(tp, Some(reason.clone()))?;
                        return Err(TopicOpError::Host {
                            tp: tp.clone(),
                            reason,
                        });
                    }
                    let lme = host.leader_epoch(tp).map_err(host_err)?;
                    self.store.set_last_mirrored_epoch(tp, lme.get())?;
                    self.store
                        .record_failover_step(tp, FailoverStep::FetchersStopped)?;
                    failpoint::hit("after_fetchers_stopped");
                }
                Some(FailoverStep::EpochBumped) => {
                    let bumped = host.bump_leader_epoch(tp).map_err(host_err)?;
                    // Its own bump does not depose this leader.
                    self.store.raise_step_fence(bumped.get());
                    self.store
                        .record_failover_step(tp, FailoverStep::EpochBumped)?;
                    failpoint::hit("after_epoch_bump");
                }
                Some(FailoverStep::TruncatedToLso) => {
                    let end = host.truncate_to_lso(tp).map_err(host_err)?;
                    // Everything below the cut was mirrored: its last record is what a
                    // failback asks for (seed 003, LastMirroredOffset).
                    self.store.record_truncated(tp, end.get() - 1)?;
                    failpoint::hit("after_truncate");
                }
                Some(FailoverStep::LmePersisted) => {
                    // Captured durably in step 1; mark the step.
                    self.store
                        .record_failover_step(tp, FailoverStep::LmePersisted)?;
                    failpoint::hit("after_lme");
                }
                Some(FailoverStep::PidResetWritten) => {
                    if !host.ends_with_pid_reset(tp).map_err(host_err)? {
                        host.write_pid_reset(tp).map_err(host_err)?;
                        failpoint::hit("after_pid_reset_append");
                    }
                    self.store
                        .record_failover_step(tp, FailoverStep::PidResetWritten)?;
                    failpoint::hit("after_pid_reset");
                }
                None => {
                    self.store
                        .transition(tp, &e.mirror, PartitionState::Stopped, None)?;
                    return Ok(());
                }
            }
        }
    }

    /// After a restart: finish interrupted failovers, restart fetchers of MIRRORING
    /// partitions, and return the partitions that need preparation or a retry (the async side
    /// drives those).
    pub fn recover(
        &mut self,
        host: &mut impl MirrorHost,
    ) -> Vec<(TopicPartition, RecoveryAction, Result<(), TopicOpError>)> {
        let mut out = Vec::new();
        for (tp, action) in self.store.recovery_plan() {
            let r = match &action {
                RecoveryAction::ResumeFailover { .. } => self.run_failover(&tp, host),
                RecoveryAction::StartFetcher | RecoveryAction::RetryFailed => {
                    match self.entry(&tp).and_then(|e| {
                        self.store
                            .mirror(&e.mirror)
                            .cloned()
                            .ok_or(MirrorError::UnknownMirror(e.mirror))
                    }) {
                        Ok(def) => {
                            host.start_fetcher(&def, &tp);
                            Ok(())
                        }
                        Err(e) => Err(e.into()),
                    }
                }
                RecoveryAction::ResumePreparing => Ok(()),
            };
            out.push((tp, action, r));
        }
        out
    }

    /// A source topic disappeared: its partitions go through failover to STOPPED (never
    /// deleted on the destination).
    pub fn source_topic_deleted(
        &mut self,
        mirror: &str,
        topic: &str,
        host: &mut impl MirrorHost,
    ) -> Result<(), TopicOpError> {
        for (tp, e) in self.partitions_of_topic(topic) {
            if e.mirror != mirror {
                continue;
            }
            if let Ok(to) = UserOp::Remove.target(e.state) {
                if to != e.state {
                    self.store.transition(
                        &tp,
                        mirror,
                        to,
                        Some("source topic deleted".to_owned()),
                    )?;
                }
            }
            self.run_failover(&tp, host)?;
        }
        Ok(())
    }

    /// State, LME and reason of every partition of a mirror, sorted.
    pub fn describe(&self, mirror: &str) -> Vec<DescribedPartition> {
        self.store
            .partitions_of(mirror)
            .map(|(tp, e)| DescribedPartition {
                topic: tp.topic.clone(),
                partition: tp.partition,
                state: e.state,
                last_mirrored_epoch: e.last_mirrored_epoch,
                reason: e.reason.clone(),
            })
            .collect()
    }

    /// LastMirroredEpochs for one partition.
    pub fn last_mirrored_epoch(&self, tp: &TopicPartition) -> Option<i32> {
        self.store.last_mirrored_epoch(tp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// A fake broker: per-partition epoch, log end, LSO, and a log of control markers.
    #[derive(Default)]
    struct FakeHost {
        topics: BTreeMap<String, i32>,
        fetchers: BTreeSet<TopicPartition>,
        epoch: BTreeMap<TopicPartition, i32>,
        end: BTreeMap<TopicPartition, i64>,
        lso: BTreeMap<TopicPartition, i64>,
        pid_resets: BTreeMap<TopicPartition, u32>,
        ends_with_reset: BTreeSet<TopicPartition>,
        /// Fail the named step once (simulates a crash at that step).
        crash_at: Option<&'static str>,
        calls: Vec<String>,
        /// Fetchers that do not stop when asked.
        stuck_fetchers: BTreeSet<TopicPartition>,
    }

    impl FakeHost {
        fn crash(&mut self, step: &'static str) -> Result<(), HostError> {
            if self.crash_at == Some(step) {
                self.crash_at = None;
                return Err(HostError::Failed(format!("crash at {step}")));
            }
            Ok(())
        }
    }

    impl MirrorHost for FakeHost {
        fn local_partition_count(&self, topic: &str) -> Option<i32> {
            self.topics.get(topic).copied()
        }
        fn start_fetcher(&mut self, _m: &MirrorDefinition, tp: &TopicPartition) {
            self.fetchers.insert(tp.clone());
            self.calls.push(format!("start {tp}"));
        }
        fn stop_fetcher(&mut self, tp: &TopicPartition) -> Result<(), HostError> {
            if self.stuck_fetchers.contains(tp) {
                return Err(HostError::FetcherStillRunning { waited_secs: 0 });
            }
            self.fetchers.remove(tp);
            self.calls.push(format!("stop {tp}"));
            Ok(())
        }
        fn leader_epoch(&self, tp: &TopicPartition) -> Result<LeaderEpoch, HostError> {
            Ok(LeaderEpoch(*self.epoch.get(tp).unwrap_or(&0)))
        }
        fn bump_leader_epoch(&mut self, tp: &TopicPartition) -> Result<LeaderEpoch, HostError> {
            self.crash("bump")?;
            let e = self.epoch.entry(tp.clone()).or_insert(0);
            *e += 1;
            self.calls.push(format!("bump {tp}"));
            Ok(LeaderEpoch(*e))
        }
        fn truncate_to_lso(&mut self, tp: &TopicPartition) -> Result<Offset, HostError> {
            self.crash("truncate")?;
            let lso = *self.lso.get(tp).unwrap_or(&0);
            self.end.insert(tp.clone(), lso);
            self.ends_with_reset.remove(tp);
            self.calls.push(format!("truncate {tp}"));
            Ok(Offset(lso))
        }
        fn ends_with_pid_reset(&self, tp: &TopicPartition) -> Result<bool, HostError> {
            Ok(self.ends_with_reset.contains(tp))
        }
        fn write_pid_reset(&mut self, tp: &TopicPartition) -> Result<(), HostError> {
            *self.pid_resets.entry(tp.clone()).or_insert(0) += 1;
            self.ends_with_reset.insert(tp.clone());
            // Crash *after* the append, before the step is recorded.
            self.crash("after-pid-reset")?;
            Ok(())
        }
    }

    fn settings() -> BTreeMap<String, String> {
        BTreeMap::from([("bootstrap.servers".to_owned(), "127.0.0.1:9092".to_owned())])
    }

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("orders", p)
    }

    /// A coordinator with mirror "dr" mirroring orders-0 and orders-1.
    fn mirroring(dir: &std::path::Path, host: &mut FakeHost) -> MirrorCoordinator {
        let mut c = MirrorCoordinator::new(MirrorStateStore::open(dir).unwrap());
        c.create_mirror("dr", settings()).unwrap();
        host.topics.insert("orders".into(), 2);
        let r = c
            .add_topics("dr", &["orders".to_owned()], &[], &[], host)
            .unwrap();
        assert!(r[0].1.is_ok());
        assert_eq!(
            c.store().state_of(&tp(0)),
            PartitionState::Unknown,
            "an existing never-mirrored topic waits for the sync loop's id check"
        );
        for p in 0..2 {
            // What the metadata sync does once the ids match.
            c.materialize_partition("dr", &tp(p)).unwrap();
            c.preparation_done(&tp(p), host).unwrap();
            host.epoch.insert(tp(p), 5);
            host.end.insert(tp(p), 100);
            host.lso.insert(tp(p), 90);
        }
        c
    }

    fn reopen(dir: &std::path::Path) -> MirrorCoordinator {
        MirrorCoordinator::new(MirrorStateStore::open(dir).unwrap())
    }

    #[test]
    fn failover_is_not_recorded_while_the_fetcher_still_runs_and_completes_on_retry() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = FakeHost::default();
        let mut c = mirroring(dir.path(), &mut h);
        h.stuck_fetchers.insert(tp(0));
        h.calls.clear();
        let r = c.remove_topics("dr", &["orders".to_owned()], &mut h);
        assert!(
            r[0].1.is_err(),
            "a failover with a running fetcher must fail"
        );
        let e = c.store().partition(&tp(0)).unwrap().clone();
        assert_eq!(e.state, PartitionState::Stopping);
        assert_eq!(e.failover_done, None, "no step recorded");
        assert!(
            e.reason.as_deref().unwrap_or("").contains("did not stop"),
            "{:?}",
            e.reason
        );
        assert!(c.is_read_only(&tp(0)), "still read-only");
        assert!(c.topic_is_read_only("orders"));
        assert!(
            !h.calls.iter().any(|c| c.starts_with("bump orders-0")),
            "no epoch bump while two writers could exist: {:?}",
            h.calls
        );
        assert_eq!(h.end[&tp(0)], 100, "nothing truncated");
        // The state survives a restart, still waiting.
        drop(c);
        let mut c = reopen(dir.path());
        assert_eq!(c.store().state_of(&tp(0)), PartitionState::Stopping);
        // The fetcher finally exits: the retry completes the failover once.
        h.stuck_fetchers.clear();
        c.run_failover(&tp(0), &mut h).unwrap();
        assert_eq!(c.store().state_of(&tp(0)), PartitionState::Stopped);
        assert_eq!(h.epoch[&tp(0)], 6);
        assert_eq!(h.end[&tp(0)], 90);
        assert_eq!(h.pid_resets[&tp(0)], 1);
    }

    #[test]
    fn failover_runs_seed_steps_in_order_and_makes_topic_writable() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = FakeHost::default();
        let mut c = mirroring(dir.path(), &mut h);
        assert!(c.topic_is_read_only("orders"));
        h.calls.clear();
        let r = c.remove_topics("dr", &["orders".to_owned()], &mut h);
        assert!(r[0].1.is_ok(), "{:?}", r[0].1);
        assert_eq!(
            h.calls,
            vec![
                "stop orders-0",
                "bump orders-0",
                "truncate orders-0",
                "stop orders-1",
                "bump orders-1",
                "truncate orders-1"
            ]
        );
        for p in 0..2 {
            assert_eq!(c.store().state_of(&tp(p)), PartitionState::Stopped);
            assert_eq!(
                c.last_mirrored_epoch(&tp(p)),
                Some(5),
                "LME = pre-bump epoch"
            );
            assert_eq!(h.epoch[&tp(p)], 6, "epoch strictly above the mirrored ones");
            assert_eq!(h.end[&tp(p)], 90, "truncated to LSO");
            assert_eq!(
                c.store().partition(&tp(p)).unwrap().last_mirrored_offset,
                Some(89),
                "the last record kept by the truncation (seed 003 LastMirroredOffset)"
            );
            assert_eq!(h.pid_resets[&tp(p)], 1);
        }
        assert!(!c.topic_is_read_only("orders"));
        // Removing again is an idempotent no-op.
        let r = c.remove_topics("dr", &["orders".to_owned()], &mut h);
        assert!(r[0].1.is_ok());
        assert_eq!(h.pid_resets[&tp(0)], 1);
        // The mirror no longer selects the topic and can be deleted.
        assert_eq!(c.topic_count("dr"), 0);
        c.delete_mirror("dr").unwrap();
    }

    #[test]
    fn crash_at_any_failover_step_then_restart_completes_exactly_once() {
        for step in ["bump", "truncate", "after-pid-reset"] {
            let dir = tempfile::tempdir().unwrap();
            let mut h = FakeHost::default();
            let mut c = mirroring(dir.path(), &mut h);
            h.crash_at = Some(step);
            let r = c.remove_topics("dr", &["orders".to_owned()], &mut h);
            assert!(r[0].1.is_err(), "{step}: the crash surfaces");
            assert!(
                c.is_read_only(&tp(0)),
                "{step}: no writes before truncation is done"
            );
            drop(c); // the process dies
            let mut c = reopen(dir.path());
            let rec = c.recover(&mut h);
            assert!(rec.iter().all(|(_, _, r)| r.is_ok()), "{step}: {rec:?}");
            for p in 0..2 {
                assert_eq!(
                    c.store().state_of(&tp(p)),
                    PartitionState::Stopped,
                    "{step}"
                );
                assert_eq!(h.pid_resets[&tp(p)], 1, "{step}: exactly one PID reset");
                assert_eq!(h.end[&tp(p)], 90, "{step}");
                assert_eq!(
                    c.last_mirrored_epoch(&tp(p)),
                    Some(5),
                    "{step}: LME survives the bump"
                );
                assert!(h.epoch[&tp(p)] > 5, "{step}");
            }
            assert!(h.fetchers.is_empty());
        }
    }

    #[test]
    fn pause_resume_follow_seed_error_rules() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = FakeHost::default();
        let mut c = mirroring(dir.path(), &mut h);
        let t = ["orders".to_owned()];
        assert!(c.pause_topics("dr", &t, &mut h)[0].1.is_ok());
        assert!(h.fetchers.is_empty(), "paused partitions have no fetcher");
        assert!(c.is_read_only(&tp(0)), "paused is still read-only");
        match &c.pause_topics("dr", &t, &mut h)[0].1 {
            Err(TopicOpError::Refused { refusal, .. }) => {
                assert_eq!(*refusal, StateRefusal::AlreadyPaused)
            }
            other => panic!("{other:?}"),
        }
        assert!(c.resume_topics("dr", &t, &mut h)[0].1.is_ok());
        assert_eq!(h.fetchers.len(), 2);
        match &c.resume_topics("dr", &t, &mut h)[0].1 {
            Err(TopicOpError::Refused { refusal, .. }) => {
                assert_eq!(*refusal, StateRefusal::NotPaused)
            }
            other => panic!("{other:?}"),
        }
        c.remove_topics("dr", &t, &mut h);
        match &c.resume_topics("dr", &t, &mut h)[0].1 {
            Err(TopicOpError::Refused { refusal, .. }) => {
                assert_eq!(*refusal, StateRefusal::BeingRemoved)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn operations_on_foreign_or_missing_topics_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = FakeHost::default();
        let mut c = mirroring(dir.path(), &mut h);
        c.create_mirror("other", settings()).unwrap();
        h.topics.insert("local-only".into(), 1);
        let r = c.pause_topics("other", &["orders".to_owned()], &mut h);
        assert!(matches!(
            r[0].1,
            Err(TopicOpError::Mirror(MirrorError::TopicNotInMirror { .. }))
        ));
        let r = c.remove_topics("dr", &["nope".to_owned()], &mut h);
        assert!(matches!(r[0].1, Err(TopicOpError::UnknownTopic(_))));
        let r = c.remove_topics("dr", &["local-only".to_owned()], &mut h);
        assert!(matches!(
            r[0].1,
            Err(TopicOpError::Mirror(MirrorError::TopicNotInMirror { .. }))
        ));
        let r = c
            .add_topics("other", &["orders".to_owned()], &[], &[], &mut h)
            .unwrap();
        assert!(matches!(
            r[0].1,
            Err(TopicOpError::Refused {
                refusal: StateRefusal::AlreadyInMirror,
                ..
            })
        ));
        assert!(matches!(
            c.add_topics("ghost", &[], &[], &[], &mut h),
            Err(MirrorError::UnknownMirror(_))
        ));
        assert!(matches!(
            c.delete_mirror("dr"),
            Err(MirrorError::MirrorNotEmpty { .. })
        ));
    }

    #[test]
    fn removing_by_pattern_fails_over_the_matching_topics_and_keeps_new_ones_out() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = FakeHost::default();
        let mut c = mirroring(dir.path(), &mut h);
        // A regex-joined topic beside the named one.
        h.topics.insert("payments".into(), 1);
        c.add_topics("dr", &[], &["pay.*".to_owned()], &[], &mut h)
            .unwrap();
        let pay = TopicPartition::new("payments", 0);
        c.materialize_partition("dr", &pay).unwrap();
        c.preparation_done(&pay, &mut h).unwrap();

        // --topic-regex 'pay.*': payments fails over, orders keeps mirroring.
        let r = c
            .remove_topic_patterns("dr", &["pay.*".to_owned()], &mut h)
            .unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].0, "payments");
        assert!(r[0].1.is_ok(), "{:?}", r[0].1);
        assert_eq!(c.store().state_of(&pay), PartitionState::Stopped);
        assert_eq!(c.store().state_of(&tp(0)), PartitionState::Mirroring);
        let def = c.store().mirror("dr").unwrap().clone();
        assert!(!def.include_patterns.contains(&"pay.*".to_owned()));
        assert!(!def.topic_filter().unwrap().matches("payroll"), "{def:?}");

        // --all: everything left fails over, and no topic joins afterwards.
        let r = c
            .remove_topic_patterns("dr", &[".*".to_owned()], &mut h)
            .unwrap();
        assert_eq!(
            r.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(),
            ["orders"]
        );
        assert!(r[0].1.is_ok());
        for p in 0..2 {
            assert_eq!(c.store().state_of(&tp(p)), PartitionState::Stopped);
        }
        let f = c.store().mirror("dr").unwrap().topic_filter().unwrap();
        assert!(!f.matches("orders") && !f.matches("anything-new"));
        // A repeat finds nothing left; an invalid pattern is refused.
        assert!(c
            .remove_topic_patterns("dr", &[".*".to_owned()], &mut h)
            .unwrap()
            .is_empty());
        assert!(matches!(
            c.remove_topic_patterns("dr", &["(".to_owned()], &mut h),
            Err(MirrorError::InvalidRegex { .. })
        ));
    }

    #[test]
    fn stopped_topic_added_to_reverse_mirror_prepares_for_failback() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = FakeHost::default();
        let mut c = mirroring(dir.path(), &mut h);
        c.remove_topics("dr", &["orders".to_owned()], &mut h);
        c.create_mirror("back", settings()).unwrap();
        let r = c
            .add_topics("back", &["orders".to_owned()], &[], &[], &mut h)
            .unwrap();
        assert!(r[0].1.is_ok());
        assert_eq!(c.store().state_of(&tp(0)), PartitionState::Preparing);
        assert_eq!(c.store().partition(&tp(0)).unwrap().mirror, "back");
        // LME of the earlier failover is kept for the failback logic.
        assert_eq!(c.last_mirrored_epoch(&tp(0)), Some(5));
    }

    #[test]
    fn fetch_failures_move_to_failed_and_back_and_restart_resumes_fetchers() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = FakeHost::default();
        let mut c = mirroring(dir.path(), &mut h);
        c.on_fetch_failed(&tp(1), "CORRUPT_MESSAGE at 7".into())
            .unwrap();
        assert_eq!(c.store().state_of(&tp(1)), PartitionState::Failed);
        assert_eq!(
            c.describe("dr")[1].reason.as_deref(),
            Some("CORRUPT_MESSAGE at 7")
        );
        c.on_fetch_failed(&tp(1), "timeout".into()).unwrap();
        assert_eq!(c.describe("dr")[1].reason.as_deref(), Some("timeout"));
        drop(c);
        let mut h2 = FakeHost::default();
        let mut c = reopen(dir.path());
        c.recover(&mut h2);
        assert_eq!(
            h2.fetchers.len(),
            2,
            "MIRRORING and FAILED partitions refetch"
        );
        c.on_fetch_recovered(&tp(1)).unwrap();
        assert_eq!(c.store().state_of(&tp(1)), PartitionState::Mirroring);
    }

    #[test]
    fn deleted_source_topic_stops_mirror_partitions_without_deleting() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = FakeHost::default();
        let mut c = mirroring(dir.path(), &mut h);
        c.source_topic_deleted("dr", "orders", &mut h).unwrap();
        assert_eq!(c.store().state_of(&tp(0)), PartitionState::Stopped);
        assert_eq!(h.topics["orders"], 2, "destination topic kept");
    }

    #[test]
    fn removing_a_pattern_matched_topic_excludes_it_from_the_pattern() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = FakeHost::default();
        let mut c = MirrorCoordinator::new(MirrorStateStore::open(dir.path()).unwrap());
        c.create_mirror("dr", settings()).unwrap();
        c.add_topics("dr", &[], &["ord.*".to_owned()], &[], &mut h)
            .unwrap();
        c.materialize_partition("dr", &tp(0)).unwrap();
        c.preparation_done(&tp(0), &mut h).unwrap();
        c.remove_topics("dr", &["orders".to_owned()], &mut h);
        let f = c.store().mirror("dr").unwrap().topic_filter().unwrap();
        assert!(!f.matches("orders"));
        assert!(f.matches("ordinals"));
    }
}
