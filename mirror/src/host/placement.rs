//! Where fetchers run: the reconcile that makes fetchers and read-only flags follow the
//! durable partition states, each mirror's core placement, and restarts on a settings change.

use super::*;
use kmirror_engine::{Assignment, TopicRule};

impl Control {
    /// Fetchers of a mirror whose connection or fetch settings changed stop here; the
    /// reconcile that follows starts them again with the new settings. Its byte-rate ceiling
    /// changes in place.
    pub(super) fn restart_on_settings_change(&mut self) {
        let store = self.service.coordinator().store();
        let mut changed = BTreeSet::new();
        let mut seen = HashMap::new();
        for def in store.mirrors() {
            self.host.manager.set_mirror_rate(
                &def.name,
                def.setting_u64(
                    kmirror_control::mirror::definition::settings::THROTTLED_RATE,
                    0,
                ),
            );
            let now = def.fetcher_settings();
            if self
                .connection_settings
                .get(&def.name)
                .is_some_and(|before| *before != now)
            {
                changed.insert(def.name.clone());
            }
            seen.insert(def.name.clone(), now);
        }
        self.connection_settings = seen;
        if changed.is_empty() {
            return;
        }
        let restart: Vec<TopicPartition> = store
            .partitions()
            .filter(|(tp, e)| changed.contains(&e.mirror) && self.host.manager.is_running(tp))
            .map(|(tp, _)| tp.clone())
            .collect();
        for name in &changed {
            tracing::info!(mirror = %name, "fetcher settings changed; reconnecting");
            // The next sync round connects with the new settings too.
            self.next_sync.remove(name);
        }
        for tp in restart {
            self.host.manager.stop_and_wait(&tp, STOP_TIMEOUT);
        }
    }

    /// Each mirror topic's engine-core rule follows its mirror's `mirror.core.assignment` /
    /// `mirror.core.pins` (persisted with the definition, so a restart applies them again).
    /// A partition whose core changes has its fetcher stopped and waited for first; the
    /// router then moves its log ([`Router::set_topic_rule_blocking`]: closed on the old
    /// core, reopened on the new one at the same log end), and the reconcile that follows
    /// starts the fetcher on the new core, resuming at that log end. A topic no mirror
    /// manages any more goes back to the broker's policy.
    pub(super) fn apply_core_placement(&mut self) {
        let store = self.service.coordinator().store();
        let router = self.host.router.clone();
        let (want, parts) = wanted_rules(store, router.ruled_topics());
        for (topic, rule) in want {
            if router.topic_rule(&topic) == rule
                || self.placement_refused.get(&topic) == Some(&rule)
            {
                continue;
            }
            let moving: Vec<&TopicPartition> = parts
                .get(&topic)
                .into_iter()
                .flatten()
                .filter(|tp| router.owner(tp) != router.owner_under(rule.as_ref(), tp))
                .collect();
            let stopped = moving.iter().all(|tp| {
                !self.host.manager.is_running(tp)
                    || self.host.manager.stop_and_wait(tp, STOP_TIMEOUT)
            });
            if !stopped {
                tracing::warn!(%topic, "a fetcher did not stop; core placement retried later");
                continue;
            }
            match router.set_topic_rule_blocking(&topic, rule.clone()) {
                Ok(moved) if !moved.is_empty() => {
                    tracing::info!(%topic, moved = moved.len(), "mirror partitions changed cores")
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(%topic, error = %e, "cannot apply core placement");
                    self.placement_refused.insert(topic, rule);
                    continue;
                }
            }
            self.placement_refused.remove(&topic);
        }
    }

    /// Read-only flags and fetchers follow the durable partition states.
    pub(super) fn reconcile(&mut self) {
        self.retry_failovers();
        self.restart_on_settings_change();
        self.apply_core_placement();
        let meta = self.host.broker.metadata();
        let store = self.service.coordinator().store();
        let mut by_topic: BTreeMap<String, Vec<(TopicPartition, String, PartitionState)>> =
            BTreeMap::new();
        for (tp, e) in store.partitions() {
            by_topic.entry(tp.topic.clone()).or_default().push((
                tp.clone(),
                e.mirror.clone(),
                e.state,
            ));
        }
        let me = self.host.broker.node_id();
        let mut starts = Vec::new();
        let mut stops = Vec::new();
        let mut flags = Vec::new();
        for (topic, parts) in &by_topic {
            let Some(t) = meta.topics.get(topic) else {
                continue;
            };
            let owner = parts
                .iter()
                .find(|(_, _, s)| s.is_read_only())
                .map(|(_, m, _)| m.clone());
            if t.mirror != owner && self.is_seat() {
                flags.push((topic.clone(), owner));
            }
            for (tp, mirror, st) in parts {
                let running = self.host.manager.is_running(tp);
                let wants = matches!(
                    st,
                    PartitionState::Preparing | PartitionState::Mirroring | PartitionState::Failed
                ) && !self.blocked.contains_key(topic)
                    && self.host.leads(&meta, tp);
                if running {
                    let throttled = crate::throttle::broker_throttles(
                        t.configs
                            .get(crate::throttle::THROTTLED_REPLICAS)
                            .map(String::as_str),
                        tp.partition,
                        me,
                    );
                    self.host.manager.set_broker_throttled(tp, throttled);
                }
                if wants && !running {
                    if let Some(def) = store.mirror(mirror) {
                        let lme = store.last_mirrored_epoch(tp).map(LeaderEpoch);
                        let skip = *st != PartitionState::Preparing;
                        starts.push(self.host.fetch_task(def, tp, lme, skip));
                    }
                } else if !wants && running && *st != PartitionState::Stopping {
                    stops.push(tp.clone());
                }
            }
        }
        // Read-only before a fetcher starts; writable only once STOPPED everywhere.
        for (topic, owner) in flags {
            match self.host.propose_topic(MetadataCommand::SetMirror {
                name: topic.clone(),
                mirror: owner.clone(),
            }) {
                Ok(_) => tracing::info!(%topic, mirror = ?owner, "mirror read-only flag updated"),
                Err(e) => tracing::warn!(%topic, error = %e, "cannot update read-only flag"),
            }
        }
        for tp in stops {
            self.host.manager.stop_and_wait(&tp, STOP_TIMEOUT);
        }
        for task in starts {
            let tp = task.tp.clone();
            if let Err(e) = self.host.manager.start(task) {
                tracing::warn!(%tp, error = %e, "cannot start mirror fetcher");
            }
        }
        let states = by_topic
            .into_values()
            .flatten()
            .map(|(tp, mirror, st)| (mirror, tp, st))
            .collect();
        self.host.manager.metrics().publish_states(states);
        let links = self
            .service
            .coordinator()
            .mirrors()
            .map(|m| {
                (
                    m.name.clone(),
                    self.service.link_state(&m.name, &self.host).0,
                )
            })
            .collect();
        self.host.manager.metrics().publish_link_states(links);
    }
}

/// Per mirror topic, the engine-core rule its mirror's placement settings give (None: the
/// broker's policy), plus `None` for every topic the router has a rule for that no mirror
/// manages any more; and each topic's mirror partitions.
#[allow(clippy::type_complexity)]
fn wanted_rules(
    store: &MirrorStateStore,
    ruled_topics: impl IntoIterator<Item = String>,
) -> (
    BTreeMap<String, Option<TopicRule>>,
    BTreeMap<String, Vec<TopicPartition>>,
) {
    let mut placements = HashMap::new();
    let mut want: BTreeMap<String, Option<TopicRule>> = BTreeMap::new();
    let mut parts: BTreeMap<String, Vec<TopicPartition>> = BTreeMap::new();
    for (tp, e) in store.partitions() {
        parts.entry(tp.topic.clone()).or_default().push(tp.clone());
        if want.contains_key(&tp.topic) {
            continue;
        }
        let placement = placements.entry(e.mirror.clone()).or_insert_with(|| {
            store
                .mirror(&e.mirror)
                .and_then(|d| d.core_placement().ok())
                .unwrap_or_default()
        });
        let (core, partitions) = placement.for_topic(&tp.topic);
        let rule = TopicRule {
            policy: placement.policy.as_deref().and_then(Assignment::parse),
            core,
            partitions,
        };
        want.insert(tp.topic.clone(), (!rule.is_empty()).then_some(rule));
    }
    for t in ruled_topics {
        want.entry(t).or_insert(None);
    }
    (want, parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_control::mirror::definition::settings::{CORE_ASSIGNMENT, CORE_PINS};

    fn mirror(
        store: &mut MirrorStateStore,
        name: &str,
        settings: &[(&str, &str)],
        tps: &[(&str, i32)],
    ) {
        let mut s = BTreeMap::from([("bootstrap.servers".to_owned(), "src:9092".to_owned())]);
        for (k, v) in settings {
            s.insert(k.to_string(), v.to_string());
        }
        store
            .create_mirror(MirrorDefinition::new(name, s).unwrap())
            .unwrap();
        for (t, p) in tps {
            store
                .transition(
                    &TopicPartition::new(*t, *p),
                    name,
                    PartitionState::Preparing,
                    None,
                )
                .unwrap();
        }
    }

    #[test]
    fn each_mirror_topic_follows_its_mirrors_pins_and_an_unmanaged_topic_returns_to_the_broker() {
        let mut store = MirrorStateStore::in_memory();
        mirror(
            &mut store,
            "pinned",
            &[
                (CORE_ASSIGNMENT, "spread"),
                (CORE_PINS, "orders:1,orders:2:0"),
            ],
            &[("orders", 0), ("orders", 2), ("payments", 0)],
        );
        mirror(&mut store, "plain", &[], &[("logs", 0)]);
        let (want, parts) = wanted_rules(&store, ["gone".to_owned(), "orders".to_owned()]);
        assert_eq!(
            want["orders"],
            Some(TopicRule {
                policy: Assignment::parse("spread"),
                core: Some(1),
                partitions: BTreeMap::from([(2, 0)]),
            })
        );
        // The mirror's policy without a pin of its own.
        assert_eq!(
            want["payments"],
            Some(TopicRule {
                policy: Assignment::parse("spread"),
                core: None,
                partitions: BTreeMap::new(),
            })
        );
        assert_eq!(want["logs"], None);
        assert_eq!(want["gone"], None);
        assert_eq!(parts["orders"].len(), 2);
    }
}
