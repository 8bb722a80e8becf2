//! Cluster metadata as the broker sees it: the durable store runs on the control-plane
//! thread; every change is published as an immutable snapshot that cores read lock-free
//! in the steady state (a version check, then a cached `Arc`).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use kmirror_control::metadata::{ClusterMetadata, MetadataStore, TopicMeta};
use kmirror_engine::{Catalog, ControlThread, EngineError, PartitionSpec, Router};
use kmirror_types::{LeaderEpoch, TopicPartition};

/// The latest published metadata snapshot.
pub struct MetaView {
    current: RwLock<Arc<ClusterMetadata>>,
    version: AtomicU64,
}

impl MetaView {
    fn new(m: ClusterMetadata) -> MetaView {
        MetaView {
            version: AtomicU64::new(m.version),
            current: RwLock::new(Arc::new(m)),
        }
    }

    pub fn load(&self) -> Arc<ClusterMetadata> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    fn publish(&self, m: &ClusterMetadata) {
        if m.version == self.version() {
            return;
        }
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(m.clone());
        self.version.store(m.version, Ordering::Release);
    }
}

/// Per-thread cache of the snapshot (no lock unless the version moved).
pub struct MetaCache {
    cached: RefCell<Arc<ClusterMetadata>>,
}

impl MetaCache {
    pub fn new(view: &MetaView) -> MetaCache {
        MetaCache {
            cached: RefCell::new(view.load()),
        }
    }

    pub fn get(&self, view: &MetaView) -> Arc<ClusterMetadata> {
        let v = view.version();
        if self.cached.borrow().version != v {
            *self.cached.borrow_mut() = view.load();
        }
        self.cached.borrow().clone()
    }
}

/// Handle to the durable metadata (control-plane thread) plus its published snapshot.
#[derive(Clone)]
pub struct Cluster {
    control: ControlThread<MetadataStore>,
    view: Arc<MetaView>,
    data_dir: PathBuf,
}

impl Cluster {
    /// Opens the store and starts the control-plane thread.
    pub fn start(data_dir: &Path) -> Result<Cluster, crate::NetError> {
        let store = MetadataStore::open(data_dir)?;
        let view = Arc::new(MetaView::new(store.state().clone()));
        let (control, _join) = ControlThread::spawn("kmirror-control", store)?;
        Ok(Cluster {
            control,
            view,
            data_dir: data_dir.to_path_buf(),
        })
    }

    pub fn view(&self) -> &Arc<MetaView> {
        &self.view
    }

    pub fn snapshot(&self) -> Arc<ClusterMetadata> {
        self.view.load()
    }

    /// Runs `f` against the store on the control thread and publishes the result.
    pub async fn mutate<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut MetadataStore) -> R + Send + 'static,
    ) -> Result<R, EngineError> {
        let view = self.view.clone();
        self.control
            .call(move |s| {
                let r = f(s);
                view.publish(s.state());
                r
            })
            .await
    }

    /// Blocking variant for plain threads.
    pub fn mutate_blocking<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut MetadataStore) -> R + Send + 'static,
    ) -> Result<R, EngineError> {
        let view = self.view.clone();
        self.control.call_blocking(move |s| {
            let r = f(s);
            view.publish(s.state());
            r
        })
    }

    /// Directory of a partition's log.
    pub fn partition_dir(&self, tp: &TopicPartition) -> PathBuf {
        partition_dir(&self.data_dir, tp)
    }

    pub fn catalog(&self) -> Arc<dyn Catalog> {
        Arc::new(MetaCatalog {
            view: self.view.clone(),
            data_dir: self.data_dir.clone(),
        })
    }

    /// Pushes a topic's current metadata (log config, leader epoch, mirror flag) to its open
    /// partitions on their owning cores. Call after changing a topic in the store.
    pub async fn refresh_partitions(
        &self,
        router: &Router,
        topic: &TopicMeta,
    ) -> Result<(), EngineError> {
        let mut pending = Vec::new();
        for p in 0..topic.partition_count() {
            let tp = TopicPartition::new(topic.name.clone(), p);
            let cfg = topic.log_config();
            let epoch = LeaderEpoch(topic.leader_epochs[p as usize]);
            let mirror = topic.mirror.clone();
            pending.push(
                router
                    .submit(router.owner(&tp), move |s| {
                        if let Ok(part) = s.partition(&tp) {
                            part.log.set_config(cfg);
                            part.leader_epoch = part.leader_epoch.max(epoch);
                            part.mirror = mirror;
                        }
                    })
                    .await?,
            );
        }
        for p in pending {
            p.wait().await?;
        }
        Ok(())
    }
}

/// Kafka's on-disk layout: `<data_dir>/topics/<topic>-<partition>/`.
pub fn partition_dir(data_dir: &Path, tp: &TopicPartition) -> PathBuf {
    data_dir.join("topics").join(tp.to_string())
}

struct MetaCatalog {
    view: Arc<MetaView>,
    data_dir: PathBuf,
}

impl Catalog for MetaCatalog {
    fn partition_spec(&self, tp: &TopicPartition) -> Option<PartitionSpec> {
        let m = self.view.load();
        let t = m.topics.get(&tp.topic)?;
        let epoch = *t.leader_epochs.get(usize::try_from(tp.partition).ok()?)?;
        Some(PartitionSpec {
            dir: partition_dir(&self.data_dir, tp),
            config: t.log_config(),
            leader_epoch: LeaderEpoch(epoch),
            topic_id: t.id.as_u128(),
            mirror: t.mirror.clone(),
            replicated: t
                .assignments
                .get(usize::try_from(tp.partition).ok()?)
                .is_some_and(|a| a.replicas.len() > 1),
        })
    }

    fn all_partitions(&self) -> Vec<TopicPartition> {
        let m = self.view.load();
        m.topics
            .values()
            .flat_map(|t| {
                (0..t.partition_count()).map(move |p| TopicPartition::new(t.name.clone(), p))
            })
            .collect()
    }
}
