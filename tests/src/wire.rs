//! A tiny blocking Kafka wire client over `std::net::TcpStream`, for assertions.
//!
//! Versions are negotiated with ApiVersions at connect: each request uses the highest version
//! both this crate (kafka-protocol) and the broker support. Topic IDs are filled in from
//! Metadata for the versions that address topics by ID.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

/// Wire-level failures, with enough context to read in a test failure.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// Socket error (including the peer closing the connection).
    #[error("io with {addr}: {source}")]
    Io {
        /// The peer.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Encoding or decoding failed.
    #[error("codec: {0}")]
    Codec(String),
    /// The broker does not support any version of an API we need.
    #[error("broker does not support API key {0}")]
    Unsupported(i16),
    /// The broker answered with an error code where one was not expected.
    #[error("{what}: error code {code}")]
    Broker {
        /// Which request.
        what: String,
        /// The Kafka error code.
        code: i16,
    },
}

/// Result alias for this module.
pub type Result<T> = std::result::Result<T, WireError>;

/// One connection to one broker.
#[derive(Debug)]
pub struct WireClient {
    addr: String,
    stream: TcpStream,
    correlation: i32,
    /// api key -> max version supported by the broker.
    versions: HashMap<i16, (i16, i16)>,
    /// The request header's client id.
    client_id: String,
}

/// Partition leader and topic id as seen in Metadata.
#[derive(Debug, Clone)]
pub struct PartitionInfo {
    /// The topic id (nil if the broker has none).
    pub topic_id: uuid::Uuid,
    /// Leader broker address, `host:port`.
    pub leader: String,
    /// Leader id.
    pub leader_id: i32,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// Replica ids, in the assignment's (preferred) order.
    pub replicas: Vec<i32>,
    /// In-sync replica ids, sorted.
    pub isr: Vec<i32>,
}

impl WireClient {
    /// Connects and negotiates versions with ApiVersions.
    pub fn connect(addr: &str) -> Result<Self> {
        let stream = TcpStream::connect(addr).map_err(|source| WireError::Io {
            addr: addr.into(),
            source,
        })?;
        Self::over(addr, stream)
    }

    /// Connects from the local address `local_ip` (any 127.x.y.z on loopback), so a broker
    /// sees a distinct peer host: ACLs can then tell two plaintext clients apart.
    pub fn connect_from(addr: &str, local_ip: std::net::IpAddr) -> Result<Self> {
        let io = |source| WireError::Io {
            addr: addr.into(),
            source,
        };
        let target: std::net::SocketAddr = addr
            .parse()
            .map_err(|e| WireError::Codec(format!("address {addr}: {e}")))?;
        let sock = socket2::Socket::new(
            socket2::Domain::for_address(target),
            socket2::Type::STREAM,
            None,
        )
        .map_err(io)?;
        sock.bind(&std::net::SocketAddr::new(local_ip, 0).into())
            .map_err(io)?;
        sock.connect(&target.into()).map_err(io)?;
        Self::over(addr, sock.into())
    }

    /// Connects, negotiates versions, then authenticates with SASL/PLAIN (SaslHandshake v1,
    /// SaslAuthenticate): the principal is `User:<user>`.
    pub fn connect_sasl_plain(addr: &str, user: &str, password: &str) -> Result<Self> {
        let mut c = Self::connect(addr)?;
        let hs = c.send_at(
            SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
            1,
        )?;
        if hs.error_code != 0 {
            return Err(WireError::Broker {
                what: "SaslHandshake PLAIN".into(),
                code: hs.error_code,
            });
        }
        let token = format!("\0{user}\0{password}");
        let v = c.version_of::<SaslAuthenticateRequest>()?;
        let auth = c.send_at(
            SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token.into_bytes())),
            v,
        )?;
        if auth.error_code != 0 {
            return Err(WireError::Broker {
                what: format!("SaslAuthenticate PLAIN as {user}"),
                code: auth.error_code,
            });
        }
        Ok(c)
    }

    fn over(addr: &str, stream: TcpStream) -> Result<Self> {
        stream.set_nodelay(true).ok();
        stream.set_read_timeout(Some(Duration::from_secs(30))).ok();
        let mut c = WireClient {
            addr: addr.to_string(),
            stream,
            correlation: 0,
            versions: HashMap::new(),
            client_id: "kmirror-tests".into(),
        };
        let resp: ApiVersionsResponse = c.send_at(
            ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str("kmirror-tests"))
                .with_client_software_version(StrBytes::from_static_str("0")),
            3,
        )?;
        if resp.error_code != 0 {
            return Err(WireError::Broker {
                what: "ApiVersions".into(),
                code: resp.error_code,
            });
        }
        for k in resp.api_keys {
            c.versions.insert(k.api_key, (k.min_version, k.max_version));
        }
        Ok(c)
    }

    /// Connects to the current leader of `topic`/`partition`, starting from any bootstrap
    /// address in `bootstrap` (comma separated).
    pub fn connect_leader(bootstrap: &str, topic: &str, partition: i32) -> Result<Self> {
        let first = bootstrap.split(',').next().unwrap_or(bootstrap);
        let mut c = WireClient::connect(first)?;
        let info = c.partition_info(topic, partition)?;
        if info.leader == c.addr {
            Ok(c)
        } else {
            WireClient::connect(&info.leader)
        }
    }

    /// The address this client is connected to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends the following requests with `client_id` in their header (after the connect's
    /// ApiVersions, which used "kmirror-tests").
    pub fn set_client_id(&mut self, client_id: &str) {
        self.client_id = client_id.to_string();
    }

    /// The broker's supported version range of `key`, if any.
    pub fn version_range(&self, key: i16) -> Option<(i16, i16)> {
        self.versions.get(&key).copied()
    }

    /// Highest version of `R` both sides support.
    pub fn version_of<R: Request>(&self) -> Result<i16> {
        let (min, max) = self
            .versions
            .get(&R::KEY)
            .copied()
            .ok_or(WireError::Unsupported(R::KEY))?;
        let v = max.min(R::VERSIONS.max);
        if v < min.max(R::VERSIONS.min) {
            return Err(WireError::Unsupported(R::KEY));
        }
        Ok(v)
    }

    /// Sends `req` at the negotiated version and decodes the response.
    pub fn send<R: Request>(&mut self, req: R) -> Result<R::Response> {
        let v = self.version_of::<R>()?;
        self.send_at(req, v)
    }

    /// Sends `req` at `version` and decodes the response.
    pub fn send_at<R: Request>(&mut self, req: R, version: i16) -> Result<R::Response> {
        self.correlation += 1;
        let correlation = self.correlation;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation)
            .with_client_id(Some(StrBytes::from_string(self.client_id.clone())));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, R::header_version(version))
            .map_err(codec)?;
        req.encode(&mut body, version).map_err(codec)?;
        self.write_frame(&body)?;
        let mut frame = self.read_frame()?;
        let rh = ResponseHeader::decode(
            &mut frame,
            <R::Response as HeaderVersion>::header_version(version),
        )
        .map_err(codec)?;
        if rh.correlation_id != correlation {
            return Err(WireError::Codec(format!(
                "correlation id {} != {correlation}",
                rh.correlation_id
            )));
        }
        R::Response::decode(&mut frame, version).map_err(codec)
    }

    /// Writes `payload` with its 4-byte length prefix.
    pub fn write_frame(&mut self, payload: &[u8]) -> Result<()> {
        let mut buf = Vec::with_capacity(payload.len() + 4);
        buf.put_i32(payload.len() as i32);
        buf.extend_from_slice(payload);
        self.write_raw(&buf)
    }

    /// Writes raw bytes, no framing.
    pub fn write_raw(&mut self, bytes: &[u8]) -> Result<()> {
        let addr = self.addr.clone();
        self.stream
            .write_all(bytes)
            .map_err(|source| WireError::Io { addr, source })
    }

    /// Reads one length-prefixed frame.
    pub fn read_frame(&mut self) -> Result<Bytes> {
        let addr = self.addr.clone();
        let io = |source| WireError::Io {
            addr: addr.clone(),
            source,
        };
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len).map_err(io)?;
        let len = i32::from_be_bytes(len);
        if !(0..=512 << 20).contains(&len) {
            return Err(WireError::Codec(format!("response frame length {len}")));
        }
        // Memory follows the bytes that arrive, not the announced length.
        let mut buf = Vec::with_capacity((len as usize).min(1 << 20));
        std::io::Read::take(&mut self.stream, len as u64)
            .read_to_end(&mut buf)
            .map_err(io)?;
        if buf.len() != len as usize {
            return Err(io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        Ok(Bytes::from(buf))
    }

    /// The underlying socket, for tests that misbehave on purpose.
    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Metadata for `topics` (all topics if `None`).
    pub fn metadata(&mut self, topics: Option<&[&str]>) -> Result<MetadataResponse> {
        let req = MetadataRequest::default()
            .with_topics(topics.map(|ts| {
                ts.iter()
                    .map(|t| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(t.to_string()))))
                    })
                    .collect()
            }))
            .with_allow_auto_topic_creation(false);
        self.send(req)
    }

    /// Leader and topic id of one partition.
    pub fn partition_info(&mut self, topic: &str, partition: i32) -> Result<PartitionInfo> {
        let md = self.metadata(Some(&[topic]))?;
        let t = md
            .topics
            .iter()
            .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some(topic))
            .ok_or_else(|| WireError::Codec(format!("topic {topic} not in metadata")))?;
        if t.error_code != 0 {
            return Err(WireError::Broker {
                what: format!("Metadata {topic}"),
                code: t.error_code,
            });
        }
        let p = t
            .partitions
            .iter()
            .find(|p| p.partition_index == partition)
            .ok_or_else(|| WireError::Codec(format!("{topic}-{partition} not in metadata")))?;
        if p.error_code != 0 {
            return Err(WireError::Broker {
                what: format!("Metadata {topic}-{partition}"),
                code: p.error_code,
            });
        }
        let b = md
            .brokers
            .iter()
            .find(|b| b.node_id == p.leader_id)
            .ok_or_else(|| {
                WireError::Codec(format!(
                    "leader {} of {topic}-{partition} unknown",
                    p.leader_id.0
                ))
            })?;
        Ok(PartitionInfo {
            topic_id: t.topic_id,
            leader: format!("{}:{}", b.host.as_str(), b.port),
            leader_id: p.leader_id.0,
            leader_epoch: p.leader_epoch,
            replicas: p.replica_nodes.iter().map(|r| r.0).collect(),
            isr: {
                let mut isr: Vec<i32> = p.isr_nodes.iter().map(|r| r.0).collect();
                isr.sort_unstable();
                isr
            },
        })
    }

    /// Creates a topic and returns the error code as is (0 = created, in which case every
    /// partition has a leader in Metadata when this returns).
    pub fn create_topic(
        &mut self,
        topic: &str,
        partitions: i32,
        replication: i16,
        configs: &[(&str, &str)],
    ) -> Result<i16> {
        let req = CreateTopicsRequest::default()
            .with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_num_partitions(partitions)
                .with_replication_factor(replication)
                .with_configs(
                    configs
                        .iter()
                        .map(|(k, v)| {
                            CreatableTopicConfig::default()
                                .with_name(StrBytes::from_string(k.to_string()))
                                .with_value(Some(StrBytes::from_string(v.to_string())))
                        })
                        .collect(),
                )])
            .with_timeout_ms(30_000);
        let resp = self.send(req)?;
        let code = resp.topics.first().map(|t| t.error_code).unwrap_or(-1);
        if code == 0 {
            // CreateTopics may answer before the new partitions show up in Metadata (Kafka
            // propagates them asynchronously): wait, so callers can use the topic at once.
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while !(0..partitions).all(|p| self.partition_info(topic, p).is_ok()) {
                if std::time::Instant::now() > deadline {
                    return Err(WireError::Codec(format!(
                        "topic {topic} created but not in Metadata after 30 s"
                    )));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(code)
    }

    /// Produces one raw record-batch blob (one or more batches) to one partition.
    /// Returns (error code, base offset).
    pub fn produce_raw(
        &mut self,
        topic: &str,
        partition: i32,
        records: Bytes,
        acks: i16,
    ) -> Result<(i16, i64)> {
        let (req, v) = self.produce_request(topic, partition, records, acks)?;
        if acks == 0 {
            // No response comes for acks=0.
            self.correlation += 1;
            let header = RequestHeader::default()
                .with_request_api_key(ProduceRequest::KEY)
                .with_request_api_version(v)
                .with_correlation_id(self.correlation)
                .with_client_id(Some(StrBytes::from_string(self.client_id.clone())));
            let mut body = BytesMut::new();
            header
                .encode(&mut body, ProduceRequest::header_version(v))
                .map_err(codec)?;
            req.encode(&mut body, v).map_err(codec)?;
            self.write_frame(&body)?;
            return Ok((0, -1));
        }
        let p = self.produce_at(req, v)?;
        Ok((p.error_code, p.base_offset))
    }

    /// Produces one raw batch blob to one partition (acks=all) and returns the partition's
    /// whole response (error code and message, base offset, log_append_time_ms, KIP-467
    /// record errors, log start offset).
    pub fn produce_response(
        &mut self,
        topic: &str,
        partition: i32,
        records: Bytes,
    ) -> Result<produce_response::PartitionProduceResponse> {
        let (req, v) = self.produce_request(topic, partition, records, -1)?;
        self.produce_at(req, v)
    }

    /// A Produce of `records` to one partition at the highest version both sides speak
    /// (naming the topic by id from v13).
    fn produce_request(
        &mut self,
        topic: &str,
        partition: i32,
        records: Bytes,
        acks: i16,
    ) -> Result<(ProduceRequest, i16)> {
        let v = self.version_of::<ProduceRequest>()?;
        let topic_id = if v >= 13 {
            self.partition_info(topic, partition)?.topic_id
        } else {
            uuid::Uuid::nil()
        };
        let req = ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_topic_id(topic_id)
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(records))])]);
        Ok((req, v))
    }

    fn produce_at(
        &mut self,
        req: ProduceRequest,
        v: i16,
    ) -> Result<produce_response::PartitionProduceResponse> {
        let resp = self.send_at(req, v)?;
        resp.responses
            .into_iter()
            .next()
            .and_then(|t| t.partition_responses.into_iter().next())
            .ok_or_else(|| WireError::Codec("empty produce response".into()))
    }

    /// One Fetch of one partition from `offset` (consumer: replica id -1), read_uncommitted
    /// unless `read_committed`.
    pub fn fetch_raw(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: i32,
        read_committed: bool,
    ) -> Result<fetch_response::PartitionData> {
        let v = self.version_of::<FetchRequest>()?;
        let topic_id = if v >= 13 {
            self.partition_info(topic, partition)?.topic_id
        } else {
            uuid::Uuid::nil()
        };
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(max_bytes)
            .with_isolation_level(i8::from(read_committed))
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                .with_topic_id(topic_id)
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_current_leader_epoch(-1)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(max_bytes)])]);
        let resp = self.send_at(req, v)?;
        if resp.error_code != 0 {
            return Err(WireError::Broker {
                what: format!("Fetch {topic}-{partition}"),
                code: resp.error_code,
            });
        }
        resp.responses
            .into_iter()
            .next()
            .and_then(|t| t.partitions.into_iter().next())
            .ok_or_else(|| WireError::Codec("empty fetch response".into()))
    }

    /// ListOffsets for one partition: `timestamp` -2 earliest, -1 latest, else by time.
    pub fn list_offset(&mut self, topic: &str, partition: i32, timestamp: i64) -> Result<i64> {
        let req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(0)
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(timestamp)])]);
        let resp = self.send(req)?;
        let p = resp
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or_else(|| WireError::Codec("empty ListOffsets response".into()))?;
        if p.error_code != 0 {
            return Err(WireError::Broker {
                what: format!("ListOffsets {topic}-{partition} ts {timestamp}"),
                code: p.error_code,
            });
        }
        Ok(p.offset)
    }

    /// The metadata quorum's leader (the active controller) and its epoch, from
    /// DescribeQuorum on `__cluster_metadata-0` (a broker forwards it to the controller,
    /// as `kafka-metadata-quorum --bootstrap-server` relies on).
    pub fn quorum_leader(&mut self) -> Result<(i32, i32)> {
        let req = DescribeQuorumRequest::default().with_topics(vec![
            describe_quorum_request::TopicData::default()
                .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
                .with_partitions(vec![
                    describe_quorum_request::PartitionData::default().with_partition_index(0)
                ]),
        ]);
        let resp = self.send(req)?;
        if resp.error_code != 0 {
            return Err(WireError::Broker {
                what: "DescribeQuorum".into(),
                code: resp.error_code,
            });
        }
        let p = resp
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or_else(|| WireError::Codec("empty DescribeQuorum response".into()))?;
        if p.error_code != 0 {
            return Err(WireError::Broker {
                what: "DescribeQuorum __cluster_metadata-0".into(),
                code: p.error_code,
            });
        }
        Ok((p.leader_id.0, p.leader_epoch))
    }

    /// Log start and log end offset of one partition.
    pub fn log_bounds(&mut self, topic: &str, partition: i32) -> Result<(i64, i64)> {
        Ok((
            self.list_offset(topic, partition, -2)?,
            self.list_offset(topic, partition, -1)?,
        ))
    }
}

fn codec(e: impl std::fmt::Display) -> WireError {
    WireError::Codec(format!("{e:#}"))
}

/// Reads a big-endian i32 at `at`.
pub fn be_i32(b: &[u8], at: usize) -> i32 {
    (&b[at..at + 4]).get_i32()
}

/// Reads a big-endian i64 at `at`.
pub fn be_i64(b: &[u8], at: usize) -> i64 {
    (&b[at..at + 8]).get_i64()
}
