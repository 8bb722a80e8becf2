//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs. Topic configs are those of
//! Apache Kafka 4.1, listed with their defaults and validators in
//! `kmirror_control::metadata::topic_config`; an unknown key or a value Kafka refuses (e.g.
//! `remote.storage.enable=true` without tiered storage) is INVALID_CONFIG with Kafka's message.
//! Broker configs: kmirror's own settings are static (config file / flags); Kafka's dynamic
//! broker configs are stored in the cluster metadata, and the log ones are the defaults of
//! topics without their own value (described with the broker level as their source).

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_configs_response::*;
use kafka_protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, DescribeConfigsRequest, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, ListConfigResourcesRequest, ListConfigResourcesResponse,
};
use kafka_protocol::ResponseError as E;
use kmirror_control::broker_config;
use kmirror_control::group_config::{self, BrokerGroupSettings};
use kmirror_control::metadata::{topic_config, ConfigOp, TopicMeta};
use kmirror_control::quorum::MetadataCommand;

use super::s;
use crate::authz::{table, Access, CLUSTER_NAME};
use crate::broker::{BrokerConfigLevel, BrokerConfigSource, Ctx, ItemError};
use crate::errors;

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const BROKER_LOGGER: i8 = 8;
const GROUP: i8 = 32;
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_DYNAMIC_BROKER: i8 = 2;
const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;
const SOURCE_GROUP: i8 = 8;

/// The broker's group settings group configs default to: kmirror's consumer-group session
/// timeout and heartbeat interval are Kafka's defaults (not configurable), as the group
/// coordinator's `GroupConfig` has them.
fn group_settings() -> BrokerGroupSettings {
    BrokerGroupSettings::default()
}

fn broker_configs(ctx: &Ctx) -> Vec<(&'static str, String)> {
    let c = &ctx.config();
    vec![
        ("node.id", c.node_id.to_string()),
        ("broker.id", c.node_id.to_string()),
        (
            "advertised.listeners",
            format!("PLAINTEXT://{}:{}", c.host, c.port),
        ),
        ("listeners", format!("PLAINTEXT://{}:{}", c.host, c.port)),
        ("log.dirs", c.data_dir.display().to_string()),
        ("num.partitions", c.default_partitions.to_string()),
        (
            "auto.create.topics.enable",
            c.auto_create_topics.to_string(),
        ),
        ("socket.request.max.bytes", c.max_request_bytes.to_string()),
        ("default.replication.factor", "1".into()),
        ("min.insync.replicas", "1".into()),
        (
            "replica.lag.time.max.ms",
            c.replica_lag_time_max_ms.to_string(),
        ),
    ]
}

/// The authorization a config resource needs (config resource types are not ACL resource
/// types): topics on the topic, groups on the group, the rest on the cluster.
fn config_denied(access: &Access<'_>, resource_type: i8, name: &str, alter: bool) -> Option<i16> {
    let (need, name) = match (resource_type, alter) {
        (TOPIC, false) => (table::DESCRIBE_CONFIGS_TOPIC, name),
        (TOPIC, true) => (table::ALTER_CONFIGS_TOPIC, name),
        (GROUP, false) => (table::DESCRIBE_CONFIGS_GROUP, name),
        (GROUP, true) => (table::ALTER_CONFIGS_GROUP, name),
        (_, false) => (table::DESCRIBE_CONFIGS_CLUSTER, CLUSTER_NAME),
        (_, true) => (table::ALTER_CONFIGS_CLUSTER, CLUSTER_NAME),
    };
    access.check(need, name).err()
}

pub(crate) fn describe_configs(
    ctx: &Ctx,
    access: &Access<'_>,
    version: i16,
    req: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let meta = ctx.meta();
    let mut results = Vec::with_capacity(req.resources.len());
    for r in req.resources {
        let name = r.resource_name.to_string();
        if let Some(code) = config_denied(access, r.resource_type, &name, false) {
            results.push(
                DescribeConfigsResult::default()
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name)
                    .with_error_code(code)
                    .with_error_message(Some(s("Authorization failed."))),
            );
            continue;
        }
        // Null (or, leniently, an empty list) means every config.
        let keys: Option<Vec<String>> = r
            .configuration_keys
            .filter(|k| !k.is_empty())
            .map(|k| k.iter().map(|x| x.to_string()).collect());
        let wanted = |k: &str| keys.as_ref().is_none_or(|ks| ks.iter().any(|x| x == k));
        let mut res = DescribeConfigsResult::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone());
        match r.resource_type {
            TOPIC => match meta.described(&name) {
                Some(t) => {
                    // Known keys, plus any other stored key (e.g. synced from a mirror
                    // source); `mirror.name` is internal and never shown.
                    let extra = t.configs.keys().filter(|k| {
                        k.as_str() != "mirror.name" && topic_config::default_value(k).is_none()
                    });
                    let configs = topic_config::KNOWN
                        .iter()
                        .map(|(k, ..)| *k)
                        .chain(extra.map(String::as_str))
                        .filter(|k| wanted(k))
                        .map(|k| {
                            let node = ctx.node_id();
                            let mut e = topic_entry(
                                t,
                                k,
                                meta.broker_topic_default(node, k),
                                version,
                                req.include_documentation,
                            );
                            if req.include_synonyms {
                                e.synonyms =
                                    topic_synonyms(t, k, &meta.broker_topic_synonyms(node, k));
                            }
                            e
                        })
                        .collect();
                    res = res.with_configs(configs);
                }
                None => {
                    res = res
                        .with_error_code(E::UnknownTopicOrPartition.code())
                        .with_error_message(Some(s(&format!("unknown topic '{name}'"))));
                }
            },
            BROKER => {
                if !name.is_empty() && name != ctx.node_id().to_string() {
                    res = res
                        .with_error_code(E::InvalidRequest.code())
                        .with_error_message(Some(s(&format!("unknown broker '{name}'"))));
                } else {
                    let level = broker_level(&name);
                    let dynamic = ctx
                        .extension()
                        .as_ref()
                        .map(|x| x.broker_configs(level))
                        .unwrap_or_default();
                    // The default entity holds only what was set as the default (Kafka's
                    // answer for `--entity-default --describe`).
                    let statics = match level {
                        BrokerConfigLevel::Node => broker_configs(ctx),
                        BrokerConfigLevel::ClusterDefault => Vec::new(),
                    };
                    // Stored dynamic configs: this broker's, then the cluster default's.
                    let entities: &[&str] = match level {
                        BrokerConfigLevel::Node => &[name.as_str(), ""],
                        BrokerConfigLevel::ClusterDefault => &[""],
                    };
                    let mut stored: BTreeMap<&str, (&str, i8)> = BTreeMap::new();
                    for (i, entity) in entities.iter().enumerate() {
                        let source = if i == 0 && level == BrokerConfigLevel::Node {
                            SOURCE_DYNAMIC_BROKER
                        } else {
                            SOURCE_DYNAMIC_DEFAULT_BROKER
                        };
                        for (k, v) in meta.broker_configs.get(*entity).into_iter().flatten() {
                            stored.entry(k.as_str()).or_insert((v.as_str(), source));
                        }
                    }
                    let stored_entries: Vec<DescribeConfigsResourceResult> = stored
                        .iter()
                        .filter(|(k, _)| wanted(k))
                        .map(|(k, (v, source))| {
                            let ty = broker_config::lookup(k).map(|x| x.ty);
                            let secret = ty == Some(broker_config::Type::Password);
                            DescribeConfigsResourceResult::default()
                                .with_name(s(k))
                                .with_value((!secret).then(|| s(v)))
                                .with_read_only(false)
                                .with_is_sensitive(secret)
                                .with_config_source(*source)
                                .with_config_type(ty.map_or(2, |t| t.code()))
                        })
                        .collect();
                    res = res.with_configs(
                        statics
                            .into_iter()
                            .filter(|(k, _)| wanted(k) && !stored.contains_key(k))
                            .map(|(k, v)| {
                                DescribeConfigsResourceResult::default()
                                    .with_name(s(k))
                                    .with_value(Some(s(&v)))
                                    .with_read_only(true)
                                    .with_config_source(SOURCE_STATIC_BROKER)
                                    .with_config_type(2)
                            })
                            .chain(dynamic.into_iter().filter(|c| wanted(c.name)).map(|c| {
                                DescribeConfigsResourceResult::default()
                                    .with_name(s(c.name))
                                    .with_value(Some(s(&c.value)))
                                    .with_read_only(false)
                                    .with_config_source(match c.source {
                                        BrokerConfigSource::DynamicBroker => SOURCE_DYNAMIC_BROKER,
                                        BrokerConfigSource::DynamicDefault => {
                                            SOURCE_DYNAMIC_DEFAULT_BROKER
                                        }
                                        BrokerConfigSource::Static => SOURCE_STATIC_BROKER,
                                    })
                                    .with_config_type(5)
                            }))
                            .chain(stored_entries)
                            .collect(),
                    );
                }
            }
            BROKER_LOGGER => {}
            GROUP if name.is_empty() => {
                res = res
                    .with_error_code(E::InvalidRequest.code())
                    .with_error_message(Some(s("Group name must not be empty")));
            }
            GROUP => {
                // Every key, the group's own value or the default (Kafka's answer; the tool
                // shows only the group's own unless asked for all).
                let own = meta.group_configs.get(&name);
                let defaults = group_settings();
                let configs = group_config::KEYS
                    .iter()
                    .filter(|(k, _)| wanted(k))
                    .map(|(k, kind)| {
                        let (value, source) = match own.and_then(|o| o.get(*k)) {
                            Some(v) => (v.clone(), SOURCE_GROUP),
                            None => (defaults.default_of(k).unwrap_or_default(), SOURCE_DEFAULT),
                        };
                        let synonyms = if req.include_synonyms {
                            vec![DescribeConfigsSynonym::default()
                                .with_name(s(k))
                                .with_value(Some(s(&value)))
                                .with_source(source)]
                        } else {
                            Vec::new()
                        };
                        DescribeConfigsResourceResult::default()
                            .with_name(s(k))
                            .with_value(Some(s(&value)))
                            .with_read_only(false)
                            .with_config_source(source)
                            .with_is_sensitive(false)
                            .with_config_type(kind.config_type())
                            .with_synonyms(synonyms)
                    })
                    .collect();
                res = res.with_configs(configs);
            }
            other => {
                res = res
                    .with_error_code(E::InvalidRequest.code())
                    .with_error_message(Some(s(&format!("unsupported resource type {other}"))));
            }
        }
        results.push(res);
    }
    DescribeConfigsResponse::default().with_results(results)
}

/// The levels a topic config's value comes from, most specific first, as Kafka lists them
/// when asked for synonyms: the topic's own value, then each dynamic broker synonym (this
/// node's, then the cluster default's), then the built-in default under the broker config's
/// name (Kafka names the unit it is defined in, e.g. `log.retention.hours=168` where kmirror
/// says `log.retention.ms=604800000`).
fn topic_synonyms(
    t: &TopicMeta,
    key: &str,
    broker: &[(&str, &str, bool, i64)],
) -> Vec<DescribeConfigsSynonym> {
    let own = t.configs.get(key).map(|v| {
        DescribeConfigsSynonym::default()
            .with_name(s(key))
            .with_value(Some(s(v)))
            .with_source(SOURCE_DYNAMIC_TOPIC)
    });
    own.into_iter()
        .chain(broker.iter().map(|(name, v, node_own, _)| {
            DescribeConfigsSynonym::default()
                .with_name(s(name))
                .with_value(Some(s(v)))
                .with_source(if *node_own {
                    SOURCE_DYNAMIC_BROKER
                } else {
                    SOURCE_DYNAMIC_DEFAULT_BROKER
                })
        }))
        .chain(topic_config::default_value(key).map(|v| {
            let name = topic_config::broker_synonyms(key)
                .first()
                .map_or(key, |(n, _)| *n);
            DescribeConfigsSynonym::default()
                .with_name(s(name))
                .with_value(Some(s(v)))
                .with_source(SOURCE_DEFAULT)
        }))
        .collect()
}

/// One topic config as DescribeConfigs lists it: the topic's own value, else the dynamic
/// broker-level one it falls back to (`broker`: value, whether the node's own), else the
/// default; with the matching source, as Kafka's `ConfigHelper` reports it.
fn topic_entry(
    t: &TopicMeta,
    key: &str,
    broker: Option<(String, bool)>,
    version: i16,
    docs: bool,
) -> DescribeConfigsResourceResult {
    let (value, source) = match (t.configs.get(key), broker) {
        (Some(v), _) => (Some(v.clone()), SOURCE_DYNAMIC_TOPIC),
        (None, Some((v, true))) => (Some(v), SOURCE_DYNAMIC_BROKER),
        (None, Some((v, false))) => (Some(v), SOURCE_DYNAMIC_DEFAULT_BROKER),
        (None, None) => (t.config_value(key), SOURCE_DEFAULT),
    };
    let mut e = DescribeConfigsResourceResult::default()
        .with_name(s(key))
        .with_value(value.map(|v| s(&v)))
        .with_read_only(false)
        .with_config_source(source)
        .with_is_sensitive(false);
    if version >= 3 {
        e = e.with_config_type(topic_config::type_code(key));
        if docs {
            e = e.with_documentation(topic_config::documentation(key).map(s));
        }
    }
    e
}

/// Applies a topic change and pushes the new log settings to the open partitions.
async fn alter_topic(
    ctx: &Ctx,
    name: String,
    change: TopicChange,
    validate_only: bool,
) -> Result<(), ItemError> {
    // A mirror topic is refused by apply (MirrorReadOnly): its configs come from the source.
    let cmd = match change {
        TopicChange::Incremental(ops) => MetadataCommand::AlterConfigs { name, ops },
        TopicChange::Replace(configs) => MetadataCommand::ReplaceConfigs { name, configs },
    };
    if validate_only {
        ctx.cluster()
            .validate(&cmd)
            .map_err(|e| (errors::metadata_error_code(&e), e.to_string()))?;
        return Ok(());
    }
    let t = ctx
        .cluster()
        .propose_topic(cmd)
        .await
        .map_err(crate::broker::propose_err)?;
    ctx.cluster()
        .refresh_partitions(ctx.router(), &t)
        .await
        .map_err(|e| (errors::engine_error_code(&e), e.to_string()))?;
    Ok(())
}

enum TopicChange {
    Incremental(Vec<ConfigOp>),
    Replace(BTreeMap<String, String>),
}

fn static_broker_error() -> ItemError {
    (
        E::InvalidRequest.code(),
        "broker configs are static in kmirror: set them in the config file or with flags".into(),
    )
}

/// The level a broker resource name addresses (the name was checked to be "" or this node).
fn broker_level(name: &str) -> BrokerConfigLevel {
    if name.is_empty() {
        BrokerConfigLevel::ClusterDefault
    } else {
        BrokerConfigLevel::Node
    }
}

/// A broker resource's changes, as Kafka 4.1 takes them: the extension's own keys (the
/// mirror ceiling) go to the extension; every other key is checked as Kafka checks dynamic
/// broker configs ([`broker_config::validate`]: read-only keys, SSL keys without a listener
/// prefix, types and ranges, per-broker keys at the cluster default; all refused with
/// INVALID_REQUEST and Kafka's message) and stored in the replicated metadata. Everything is
/// validated before anything is applied. `replace` is legacy AlterConfigs: the entity's
/// stored keys not named are dropped.
async fn alter_broker(
    ctx: &Ctx,
    name: &str,
    changes: Vec<(String, Option<String>)>,
    validate_only: bool,
    replace: bool,
) -> Result<(), ItemError> {
    if !name.is_empty() && name != ctx.node_id().to_string() {
        return Err((E::InvalidRequest.code(), format!("unknown broker '{name}'")));
    }
    let ext = ctx.extension();
    let level = broker_level(name);
    let refused =
        |e: crate::broker::ExtensionError| (crate::errors::extension_error_code(&e), e.to_string());
    let mut stored = Vec::new();
    let mut extension = Vec::new();
    for (k, v) in changes {
        match ext.and_then(|x| x.alter_broker_config(level, &k, v.as_deref(), true)) {
            Some(check) => {
                check.await.map_err(refused)?;
                extension.push((k, v));
            }
            None => stored.push((k, v)),
        }
    }
    let sets: Vec<(&str, &str)> = stored
        .iter()
        .filter_map(|(k, v)| v.as_deref().map(|v| (k.as_str(), v)))
        .collect();
    broker_config::validate(&sets, level == BrokerConfigLevel::Node)
        .map_err(|msg| (E::InvalidRequest.code(), msg))?;
    if validate_only {
        return Ok(());
    }
    for (k, v) in &extension {
        if let Some(apply) = ext.and_then(|x| x.alter_broker_config(level, k, v.as_deref(), false))
        {
            apply.await.map_err(refused)?;
        }
    }
    if !stored.is_empty() || replace {
        ctx.cluster()
            .propose(kmirror_control::quorum::ClusterCommand::Metadata(
                MetadataCommand::AlterBrokerConfigs {
                    entity: name.to_owned(),
                    changes: stored,
                    replace,
                },
            ))
            .await
            .map_err(crate::broker::propose_err)?;
    }
    Ok(())
}

/// A GROUP resource's changes (`replace`: legacy AlterConfigs, the group's other keys are
/// dropped), checked as Kafka's controller checks them: the group's resulting keys must pass
/// [`BrokerGroupSettings::validate`] (INVALID_CONFIG with Kafka's message), and the empty
/// name (Kafka's default entity) is refused. Stored in the replicated metadata.
async fn alter_group(
    ctx: &Ctx,
    name: &str,
    changes: Vec<(String, Option<String>)>,
    validate_only: bool,
    replace: bool,
) -> Result<(), ItemError> {
    if name.is_empty() {
        return Err((
            E::InvalidRequest.code(),
            "Default group resources are not allowed.".into(),
        ));
    }
    let mut after = if replace {
        BTreeMap::new()
    } else {
        ctx.meta()
            .group_configs
            .get(name)
            .cloned()
            .unwrap_or_default()
    };
    kmirror_control::broker_config::apply(&mut after, &changes, false);
    group_settings()
        .validate(&after)
        .map_err(|msg| (E::InvalidConfig.code(), msg))?;
    if validate_only {
        return Ok(());
    }
    ctx.cluster()
        .propose(kmirror_control::quorum::ClusterCommand::Metadata(
            MetadataCommand::AlterGroupConfigs {
                group: name.to_owned(),
                changes,
                replace,
            },
        ))
        .await
        .map_err(crate::broker::propose_err)?;
    Ok(())
}

/// A GROUP resource's IncrementalAlterConfigs entries as changes: SET and DELETE; APPEND and
/// SUBTRACT are refused (no group config is a list), and so is a SET without a value.
fn group_changes(
    configs: &[kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig],
) -> Result<Vec<(String, Option<String>)>, ItemError> {
    let mut changes = Vec::new();
    for c in configs {
        let k = c.name.to_string();
        match c.config_operation {
            0 => match &c.value {
                Some(v) => changes.push((k, Some(v.to_string()))),
                None => {
                    return Err((
                        E::InvalidConfig.code(),
                        format!("Null value not supported for group configs: {k}"),
                    ))
                }
            },
            1 => changes.push((k, None)),
            op => {
                let verb = if op == 2 { "APPEND" } else { "SUBTRACT" };
                return Err((
                    E::InvalidConfig.code(),
                    format!("Can't {verb} to key {k} because its type is not LIST."),
                ));
            }
        }
    }
    Ok(changes)
}

/// A legacy AlterConfigs resource's entries as changes (a null value deletes).
fn legacy_changes(
    r: &kafka_protocol::messages::alter_configs_request::AlterConfigsResource,
) -> Vec<(String, Option<String>)> {
    r.configs
        .iter()
        .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
        .collect()
}

pub(crate) async fn alter_configs(
    ctx: &Ctx,
    access: &Access<'_>,
    _version: i16,
    req: AlterConfigsRequest,
) -> AlterConfigsResponse {
    let mut out = Vec::with_capacity(req.resources.len());
    for r in req.resources {
        let name = r.resource_name.to_string();
        let denied = config_denied(access, r.resource_type, &name, true);
        let res = match r.resource_type {
            _ if denied.is_some() => Err((
                denied.unwrap_or_default(),
                "Authorization failed.".to_string(),
            )),
            TOPIC => {
                let map = r
                    .configs
                    .iter()
                    .filter_map(|c| {
                        c.value
                            .as_ref()
                            .map(|v| (c.name.to_string(), v.to_string()))
                    })
                    .collect();
                alter_topic(ctx, name, TopicChange::Replace(map), req.validate_only).await
            }
            BROKER => alter_broker(ctx, &name, legacy_changes(&r), req.validate_only, true).await,
            GROUP => alter_group(ctx, &name, legacy_changes(&r), req.validate_only, true).await,
            _ => Err(static_broker_error()),
        };
        let mut item = alter_configs_response::AlterConfigsResourceResponse::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name)
            .with_error_message(None);
        if let Err((code, msg)) = res {
            item = item.with_error_code(code).with_error_message(Some(s(&msg)));
        }
        out.push(item);
    }
    AlterConfigsResponse::default().with_responses(out)
}

pub(crate) async fn incremental_alter_configs(
    ctx: &Ctx,
    access: &Access<'_>,
    _version: i16,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut out = Vec::with_capacity(req.resources.len());
    for r in req.resources {
        let name = r.resource_name.to_string();
        let denied = config_denied(access, r.resource_type, &name, true);
        let res = match r.resource_type {
            _ if denied.is_some() => Err((
                denied.unwrap_or_default(),
                "Authorization failed.".to_string(),
            )),
            TOPIC => {
                let mut ops = Vec::new();
                let mut bad = None;
                for c in &r.configs {
                    let k = c.name.to_string();
                    let v = c.value.as_ref().map(|v| v.to_string()).unwrap_or_default();
                    ops.push(match c.config_operation {
                        0 => ConfigOp::Set(k, v),
                        1 => ConfigOp::Delete(k),
                        2 => ConfigOp::Append(k, v),
                        3 => ConfigOp::Subtract(k, v),
                        op => {
                            bad = Some((
                                E::InvalidRequest.code(),
                                format!("unknown config operation {op}"),
                            ));
                            break;
                        }
                    });
                }
                match bad {
                    Some(e) => Err(e),
                    None => {
                        alter_topic(ctx, name, TopicChange::Incremental(ops), req.validate_only)
                            .await
                    }
                }
            }
            BROKER => {
                let mut changes = Vec::new();
                let mut bad = None;
                for c in &r.configs {
                    let v = c.value.as_ref().map(|v| v.to_string());
                    match c.config_operation {
                        0 => changes.push((c.name.to_string(), v)),
                        1 => changes.push((c.name.to_string(), None)),
                        op => {
                            bad = Some((
                                E::InvalidRequest.code(),
                                format!("operation {op} does not apply to {}", c.name.as_str()),
                            ));
                            break;
                        }
                    }
                }
                match bad {
                    Some(e) => Err(e),
                    None => alter_broker(ctx, &name, changes, req.validate_only, false).await,
                }
            }
            GROUP => match group_changes(&r.configs) {
                Ok(changes) => alter_group(ctx, &name, changes, req.validate_only, false).await,
                Err(e) => Err(e),
            },
            _ => Err(static_broker_error()),
        };
        let mut item = incremental_alter_configs_response::AlterConfigsResourceResponse::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name)
            .with_error_message(None);
        if let Err((code, msg)) = res {
            item = item.with_error_code(code).with_error_message(Some(s(&msg)));
        }
        out.push(item);
    }
    IncrementalAlterConfigsResponse::default().with_responses(out)
}

/// ListConfigResources: v0 (ListClientMetricsResources) lists client-metrics resources, of
/// which kmirror has none; v1 lists the resources of the asked types (all supported types
/// when none is asked): every topic, this cluster's brokers and their loggers, and groups
/// with configs (kmirror stores none). An unsupported type is UNSUPPORTED_VERSION, as Kafka
/// answers.
pub(crate) fn list_config_resources(
    ctx: &Ctx,
    access: &Access<'_>,
    version: i16,
    req: ListConfigResourcesRequest,
) -> ListConfigResourcesResponse {
    use kafka_protocol::messages::list_config_resources_response::ConfigResource;
    const CLIENT_METRICS: i8 = 16;
    let resp = ListConfigResourcesResponse::default();
    if let Err(code) = access.check_cluster(table::DESCRIBE_CONFIGS_CLUSTER) {
        return resp.with_error_code(code);
    }
    let all = [TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP];
    let types: Vec<i8> = if version == 0 {
        vec![CLIENT_METRICS]
    } else if req.resource_types.is_empty() {
        all.to_vec()
    } else {
        req.resource_types.clone()
    };
    if types.iter().any(|t| !all.contains(t)) {
        return resp.with_error_code(E::UnsupportedVersion.code());
    }
    let meta = ctx.meta();
    let mut out = Vec::new();
    let mut push = |ty: i8, name: String| {
        out.push(
            ConfigResource::default()
                .with_resource_type(ty)
                .with_resource_name(s(&name)),
        )
    };
    for ty in types {
        match ty {
            TOPIC => meta
                .described_topics()
                .for_each(|t| push(TOPIC, t.name.clone())),
            BROKER | BROKER_LOGGER => {
                let mut ids: Vec<i32> = meta.brokers.keys().copied().collect();
                if ids.is_empty() {
                    ids.push(ctx.node_id());
                }
                ids.into_iter().for_each(|id| push(ty, id.to_string()));
            }
            // Kafka lists the groups that have configs (its GroupConfigManager's ids).
            GROUP => meta
                .group_configs
                .keys()
                .for_each(|g| push(GROUP, g.clone())),
            _ => {}
        }
    }
    resp.with_config_resources(out)
}
