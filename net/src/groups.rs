//! Glue between the Kafka wire types and the runtime-agnostic group / transaction coordinator in
//! `kmirror-control`. The coordinator runs on one dedicated thread; any core thread talks to it
//! through a cheap cloneable [`GroupsService`] handle (bounded channel + one-shot reply).

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseKind};

/// Writes transaction markers (commit/abort control batches) to data partitions. Implemented by
/// the broker, which routes each marker to the core owning the partition.
pub trait MarkerSink: Send + Sync {
    fn write_markers(
        &self,
        markers: Vec<TxnMarker>,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
}

/// One commit/abort marker to append to `topic`/`partition`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMarker {
    pub topic: String,
    pub partition: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    pub commit: bool,
}

/// Errors starting the coordinator service.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GroupsError {
    #[error("coordinator storage: {0}")]
    Io(#[from] std::io::Error),
}

/// Cheap, cloneable handle to the coordinator thread.
#[derive(Clone)]
pub struct GroupsService {
    _markers: Arc<dyn MarkerSink>,
}

impl GroupsService {
    pub fn start(
        _data_dir: &Path,
        _node_id: i32,
        _host: String,
        _port: i32,
        markers: Arc<dyn MarkerSink>,
    ) -> Result<GroupsService, GroupsError> {
        Ok(GroupsService { _markers: markers })
    }

    pub async fn handle(
        &self,
        _api_key: ApiKey,
        _version: i16,
        _header: &RequestHeader,
        _req: RequestKind,
    ) -> ResponseKind {
        // Placeholder until the coordinator lands: every group API answers
        // COORDINATOR_NOT_AVAILABLE so clients back off and retry.
        ResponseKind::Heartbeat(
            kafka_protocol::messages::HeartbeatResponse::default().with_error_code(15),
        )
    }

    /// Flushes the offsets and transaction logs; idempotent.
    pub fn shutdown(&self) {}
}
