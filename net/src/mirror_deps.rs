//! [`MirrorDeps`]: what the mirror plug-in may use of a running broker, and nothing more.
//!
//! The mirror crate gets this trait object in [`crate::broker::ExtensionApis::started`]
//! instead of the broker itself, so the broker's fields and services can change without the
//! mirror noticing, and the mirror's sync and failover code is testable over a small
//! in-memory stand-in. Redpanda's cluster link gives its data plane the same kind of seam
//! (a sink and a source of partition operations).
//!
//! Four groups of operations, each the broker's one path for that thing:
//! - identity and settings: node id, data dir, `default.replication.factor`, the
//!   inter-broker listener (forwarded mirror requests, peers' high watermarks and groups);
//! - metadata: the published snapshot and its version, the quorum status, a partition's
//!   role on this node, whether this node hosts a replica, and proposals (every change goes
//!   through the quorum, as an admin request's would);
//! - partitions: pushing a topic's metadata to its open partitions (the logs themselves are
//!   reached through the engine's router, on their owning cores);
//! - security and coordinators: the authorizer, the applied ACLs and client quotas, a quota
//!   change, and a request to this node's group coordinator.
//!
//! Blocking methods block the calling thread (the mirror's control thread); none may be
//! called on an engine core.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseKind};
use kmirror_cluster::QuorumStatus;
use kmirror_control::acl::AclBinding;
use kmirror_control::metadata::{ClusterMetadata, TopicMeta};
use kmirror_control::mirror::{MirrorStateStore, MirrorWriter};
use kmirror_control::quorum::{ClusterCommand, MetadataCommand, Outcome};
use kmirror_control::quota::{Alteration, Entity, QuotaError, Values};
use kmirror_control::replicated::Committer;
use kmirror_engine::{EngineError, Router};
use kmirror_types::TopicPartition;

use crate::authz::Access;
use crate::broker::{Broker, ItemError};
use crate::cluster::{ProposeFailure, Role};
use crate::interbroker::InterBroker;
use crate::session::Session;

/// The broker as the mirror plug-in sees it. Implemented by [`Broker`].
pub trait MirrorDeps: Send + Sync + 'static {
    /// This node's id.
    fn node_id(&self) -> i32;
    /// The data directory (the mirror keeps its feature level and byte-rate ceiling there).
    fn data_dir(&self) -> &Path;
    /// `default.replication.factor`, for mirror topics created without one.
    fn default_replication_factor(&self) -> i16;
    /// How this node reaches its peers' inter-broker listener.
    fn inter_broker(&self) -> &InterBroker;

    /// The published cluster metadata.
    fn metadata(&self) -> Arc<ClusterMetadata>;
    /// The version of the published metadata (changes with every applied metadata record).
    fn metadata_version(&self) -> u64;
    /// The metadata quorum as this node sees it (leader, term, commit and applied index).
    fn quorum_status(&self) -> Arc<QuorumStatus>;
    /// This node's role for `tp` in `meta` (None: not a replica, or no such partition).
    fn role(&self, meta: &ClusterMetadata, tp: &TopicPartition) -> Option<Role>;
    /// Whether this node holds a replica of partition `p` of `t`.
    fn hosts(&self, t: &TopicMeta, p: i32) -> bool;
    /// Proposes `cmd` to the quorum and waits until it is applied here (blocking).
    fn propose(&self, cmd: ClusterCommand) -> Result<Outcome, ProposeFailure>;
    /// Proposes a topic change and returns the topic as applied (blocking).
    fn propose_topic(&self, cmd: MetadataCommand) -> Result<TopicMeta, ProposeFailure>;
    /// Creates internal topic `name` (`__consumer_offsets`) if it does not exist yet, as a
    /// client's FindCoordinator would (blocking). `Ok(None)`: it exists.
    fn ensure_internal_topic(&self, name: &str) -> Result<Option<TopicMeta>, ItemError>;
    /// The version of the replicated mirror state (changes when a mirror record applies).
    fn mirror_state_version(&self) -> u64;
    /// The replicated mirror state as applied on this node, writing through `committer` at
    /// quorum term `term`; None when the controller does not answer within `timeout`.
    fn mirror_state(
        &self,
        committer: Arc<dyn Committer>,
        term: u64,
        timeout: Duration,
    ) -> Option<MirrorStateStore>;

    /// Pushes `t`'s metadata (epoch, configs, mirror flag) to its open partitions on their
    /// owning cores (blocking).
    fn refresh_partitions(&self, router: &Router, t: &TopicMeta) -> Result<(), EngineError>;

    /// The authorizer's view of `session` (the mirror APIs are authorized like any other).
    fn access(&self, session: &Session) -> Access<'_>;
    /// The applied ACLs.
    fn acls(&self) -> Arc<Vec<AclBinding>>;
    /// The mirror that wrote each synced ACL binding (the rest are local).
    fn acl_owners(&self) -> Arc<BTreeMap<AclBinding, String>>;
    /// The applied client quotas.
    fn quotas(&self) -> Arc<BTreeMap<Entity, Values>>;
    /// The mirror that wrote each synced quota entity (the rest are local).
    fn quota_owners(&self) -> Arc<BTreeMap<Entity, String>>;
    /// Applies a mirror's quota changes through the quorum (blocking), one result per
    /// alteration; `writer` says which mirror and in which mode (see
    /// `kmirror_control::mirror::owners`).
    fn alter_quotas(
        &self,
        plan: &[Alteration],
        writer: MirrorWriter,
    ) -> Vec<Result<(), QuotaError>>;
    /// Sends one request to this node's group coordinator (blocking); None: this node runs
    /// no group coordinator.
    fn group_request(
        &self,
        key: ApiKey,
        version: i16,
        header: &RequestHeader,
        req: RequestKind,
    ) -> Option<ResponseKind>;
}

impl MirrorDeps for Broker {
    fn node_id(&self) -> i32 {
        self.config.node_id
    }

    fn data_dir(&self) -> &Path {
        &self.config.data_dir
    }

    fn default_replication_factor(&self) -> i16 {
        self.config.default_replication_factor
    }

    fn inter_broker(&self) -> &InterBroker {
        &self.config.inter_broker
    }

    fn metadata(&self) -> Arc<ClusterMetadata> {
        self.cluster.snapshot()
    }

    fn metadata_version(&self) -> u64 {
        self.cluster.view().version()
    }

    fn quorum_status(&self) -> Arc<QuorumStatus> {
        self.cluster.quorum_status()
    }

    fn role(&self, meta: &ClusterMetadata, tp: &TopicPartition) -> Option<Role> {
        self.cluster.role(meta, tp)
    }

    fn hosts(&self, t: &TopicMeta, p: i32) -> bool {
        self.cluster.hosts(t, p)
    }

    fn propose(&self, cmd: ClusterCommand) -> Result<Outcome, ProposeFailure> {
        self.cluster.propose_blocking(cmd)
    }

    fn propose_topic(&self, cmd: MetadataCommand) -> Result<TopicMeta, ProposeFailure> {
        self.cluster.propose_topic_blocking(cmd)
    }

    fn ensure_internal_topic(&self, name: &str) -> Result<Option<TopicMeta>, ItemError> {
        futures_lite::future::block_on(self.propose_internal_topic(name))
    }

    fn mirror_state_version(&self) -> u64 {
        self.cluster.mirror_state_version()
    }

    fn mirror_state(
        &self,
        committer: Arc<dyn Committer>,
        term: u64,
        timeout: Duration,
    ) -> Option<MirrorStateStore> {
        self.cluster.driver().read(
            move |n| MirrorStateStore::replicated(n.mirrors(), committer, term),
            timeout,
        )
    }

    fn refresh_partitions(&self, router: &Router, t: &TopicMeta) -> Result<(), EngineError> {
        futures_lite::future::block_on(self.cluster.refresh_partitions(router, t))
    }

    fn access(&self, session: &Session) -> Access<'_> {
        self.authz.access(session)
    }

    fn acls(&self) -> Arc<Vec<AclBinding>> {
        self.acls.all()
    }

    fn acl_owners(&self) -> Arc<BTreeMap<AclBinding, String>> {
        self.acls.owners()
    }

    fn quotas(&self) -> Arc<BTreeMap<Entity, Values>> {
        self.quotas.all()
    }

    fn quota_owners(&self) -> Arc<BTreeMap<Entity, String>> {
        self.quotas.owners()
    }

    fn alter_quotas(
        &self,
        plan: &[Alteration],
        writer: MirrorWriter,
    ) -> Vec<Result<(), QuotaError>> {
        crate::quota::alter(&self.cluster, &self.quotas, plan, false, Some(writer))
    }

    fn group_request(
        &self,
        key: ApiKey,
        version: i16,
        header: &RequestHeader,
        req: RequestKind,
    ) -> Option<ResponseKind> {
        let groups = self.groups.as_ref()?;
        // The share-offset requests resolve topic names against the cluster's topics.
        let topics = crate::groups::topic_view(&self.cluster.snapshot());
        Some(futures_lite::future::block_on(groups.handle_with_topics(
            key,
            version,
            header,
            req,
            Some(topics),
            None,
        )))
    }
}
