//! Feature flags (KIP-584): what ApiVersions advertises as supported and finalized, and
//! UpdateFeatures.
//!
//! kmirror finalizes `metadata.version` and `kraft.version` at fixed levels (it has no KRaft
//! quorum to upgrade; the levels are those of the Kafka release it is a drop-in for) and
//! `mirror.version`, which the mirroring extension owns and persists: setting it to 0 turns
//! the mirror APIs off (UNSUPPORTED_VERSION), as KIP-1279 says. `share.version` (KIP-932) is
//! the cluster's: kept in the replicated metadata, 0 until `kafka-features upgrade` sets it,
//! and while it is 0 the share-group APIs answer UNSUPPORTED_VERSION (ApiVersions lists
//! them either way, as Kafka does). Features kmirror does not implement (transaction.version
//! 2, group.version 1, ...) are not advertised: a client seeing them finalized would switch
//! protocols kmirror does not speak.
//!
//! Updates are validated like Kafka's controller: an unknown feature or a level outside the
//! supported range is INVALID_UPDATE_VERSION, a lower level needs a downgrade type, and a
//! request is applied all or nothing. Changes run on the blocking pool (the owner fsyncs).

use std::sync::atomic::{AtomicI64, Ordering};

use kafka_protocol::messages::api_versions_response::{FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;
use kafka_protocol::messages::{
    ApiVersionsResponse, UpdateFeaturesRequest, UpdateFeaturesResponse,
};
use kafka_protocol::ResponseError as E;

use crate::authz::{table, Access};
use crate::broker::{Ctx, ExtensionFeature};
use crate::handlers::s;

/// `metadata.version` levels: 3.3-IV3 (the oldest Kafka 4 accepts) to 4.1-IV1.
pub(crate) const METADATA_VERSION: (i16, i16) = (7, 27);
/// `kraft.version`: static quorum (0) or KIP-853 dynamic quorum (1).
pub(crate) const KRAFT_VERSION: (i16, i16) = (0, 1);
const KRAFT_VERSION_FINALIZED: i16 = 0;
/// KIP-932's feature: share groups off (0) or on (1).
pub(crate) const SHARE_VERSION: &str = "share.version";

/// Whether share groups are on (`share.version` ≥ 1).
pub(crate) fn share_groups_enabled(meta: &kmirror_control::metadata::ClusterMetadata) -> bool {
    meta.features.get(SHARE_VERSION).is_some_and(|l| *l >= 1)
}

/// Kafka's UpdateFeatures upgrade types.
const UPGRADE: i8 = 1;
const SAFE_DOWNGRADE: i8 = 2;
const UNSAFE_DOWNGRADE: i8 = 3;

/// Bumped on every applied update, so clients caching finalized features see a change.
static EPOCH: AtomicI64 = AtomicI64::new(1);

/// Every feature with its supported range and finalized level (0 = not finalized).
pub(crate) fn all(ctx: &Ctx) -> Vec<ExtensionFeature> {
    let mut v = vec![
        ExtensionFeature {
            name: "metadata.version",
            min: METADATA_VERSION.0,
            max: METADATA_VERSION.1,
            level: METADATA_VERSION.1,
        },
        ExtensionFeature {
            name: "kraft.version",
            min: KRAFT_VERSION.0,
            max: KRAFT_VERSION.1,
            level: KRAFT_VERSION_FINALIZED,
        },
        ExtensionFeature {
            name: SHARE_VERSION,
            min: 0,
            max: 1,
            level: ctx.meta().features.get(SHARE_VERSION).copied().unwrap_or(0),
        },
    ];
    if let Some(ext) = ctx.extension() {
        v.extend(ext.features());
    }
    v
}

/// Fills ApiVersions' (v3+) supported and finalized features.
pub(crate) fn advertise(ctx: &Ctx, version: i16, resp: &mut ApiVersionsResponse) {
    if version < 3 {
        return;
    }
    let all = all(ctx);
    resp.supported_features = all
        .iter()
        .map(|f| {
            SupportedFeatureKey::default()
                .with_name(s(f.name))
                .with_min_version(f.min)
                .with_max_version(f.max)
        })
        .collect();
    // Level 0 means "not finalized": Kafka leaves such features out of the finalized list.
    resp.finalized_features = all
        .iter()
        .filter(|f| f.level > 0)
        .map(|f| {
            FinalizedFeatureKey::default()
                .with_name(s(f.name))
                .with_min_version_level(f.level)
                .with_max_version_level(f.level)
        })
        .collect();
    resp.finalized_features_epoch = EPOCH.load(Ordering::Relaxed);
}

/// Why one update is refused: Kafka's code and message.
type Refusal = (i16, String);

fn validate(
    features: &[ExtensionFeature],
    node: i32,
    name: &str,
    level: i16,
    kind: i8,
) -> Result<(), Refusal> {
    let invalid = |m: String| (E::InvalidUpdateVersion.code(), m);
    let Some(f) = features.iter().find(|f| f.name == name) else {
        return Err(invalid(format!(
            "Invalid update version {level} for feature {name}. Local controller {node} does not support this feature."
        )));
    };
    if !(UPGRADE..=UNSAFE_DOWNGRADE).contains(&kind) {
        return Err((
            E::InvalidRequest.code(),
            format!("Unknown upgrade type {kind}"),
        ));
    }
    // Level 0 removes a feature (not metadata.version); otherwise it must be supported.
    let removable = name != "metadata.version";
    if !(level == 0 && removable) && (level < f.min || level > f.max) {
        return Err(invalid(format!(
            "Invalid update version {level} for feature {name}. Local controller {node} only supports versions {}-{}",
            f.min, f.max
        )));
    }
    if level < f.level && kind == UPGRADE {
        return Err(invalid(format!(
            "Invalid update version {level} for feature {name}. Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade."
        )));
    }
    // kmirror cannot move these: there is no quorum or metadata log to migrate.
    if level != f.level && (name == "metadata.version" || name == "kraft.version") {
        return Err(invalid(format!(
            "Invalid update version {level} for feature {name}. kmirror finalizes {name} at {}",
            f.level
        )));
    }
    Ok(())
}

/// UpdateFeatures: ALTER on the cluster; all updates valid or none applied.
pub(crate) async fn update_features(
    ctx: &Ctx,
    access: &Access<'_>,
    version: i16,
    req: UpdateFeaturesRequest,
) -> UpdateFeaturesResponse {
    let mut resp = UpdateFeaturesResponse::default().with_error_message(None);
    let names: Vec<String> = req
        .feature_updates
        .iter()
        .map(|u| u.feature.to_string())
        .collect();
    let finish = |mut resp: UpdateFeaturesResponse, outcomes: Vec<Result<(), Refusal>>| {
        if version <= 1 {
            resp.results = names
                .iter()
                .zip(&outcomes)
                .map(|(n, o)| {
                    let r = UpdatableFeatureResult::default().with_feature(s(n));
                    match o {
                        Ok(()) => r,
                        Err((c, m)) => r.with_error_code(*c).with_error_message(Some(s(m))),
                    }
                })
                .collect();
        } else if let Some(Err((c, m))) = outcomes.iter().find(|o| o.is_err()) {
            // v2 has one answer for the request (Kafka's wording).
            resp.error_code = *c;
            resp.error_message = Some(s(&format!(
                "The update failed for all features since the following feature had an error: {m}"
            )));
        }
        resp
    };
    if let Err(code) = access.check_cluster(table::ALTER_FEATURES) {
        resp.error_code = code;
        resp.error_message = Some(s("Cluster authorization failed."));
        let n = names.len();
        return finish(
            resp,
            vec![Err((code, "Cluster authorization failed.".into())); n],
        );
    }
    let features = all(ctx);
    let mut seen = std::collections::BTreeSet::new();
    let outcomes: Vec<Result<(), Refusal>> = req
        .feature_updates
        .iter()
        .map(|u| {
            if !seen.insert(u.feature.to_string()) {
                return Err((
                    E::InvalidRequest.code(),
                    format!(
                        "Feature {} appears more than once in the request.",
                        u.feature.as_str()
                    ),
                ));
            }
            let kind = if version == 0 {
                if u.allow_downgrade {
                    SAFE_DOWNGRADE
                } else {
                    UPGRADE
                }
            } else {
                u.upgrade_type
            };
            validate(
                &features,
                ctx.node_id(),
                u.feature.as_str(),
                u.max_version_level,
                kind,
            )
        })
        .collect();
    if outcomes.iter().any(|o| o.is_err()) || req.validate_only {
        // All or nothing: the valid updates of a refused request are not applied.
        return finish(resp, outcomes);
    }
    let changes: Vec<(String, i16)> = req
        .feature_updates
        .iter()
        .filter(|u| {
            features
                .iter()
                .any(|f| f.name == u.feature.as_str() && f.level != u.max_version_level)
        })
        .map(|u| (u.feature.to_string(), u.max_version_level))
        .collect();
    let mut applied: Vec<Result<(), Refusal>> = outcomes;
    // The cluster's own features go through the quorum; the rest are the extension's.
    let (cluster_kept, changes): (Vec<_>, Vec<_>) =
        changes.into_iter().partition(|(n, _)| n == SHARE_VERSION);
    for (n, level) in cluster_kept {
        let cmd = kmirror_control::quorum::ClusterCommand::Metadata(
            kmirror_control::quorum::MetadataCommand::SetFeature {
                name: n.clone(),
                level,
            },
        );
        if let Err(e) = ctx.cluster().propose(cmd).await {
            let (code, msg) = crate::broker::propose_err(e);
            if let Some(i) = names.iter().position(|x| *x == n) {
                applied[i] = Err((code, msg));
            }
        }
        EPOCH.fetch_add(1, Ordering::Relaxed);
    }
    if let (Some(ext), false) = (ctx.extension().cloned(), changes.is_empty()) {
        let done = glommio::executor()
            .spawn_blocking(move || {
                changes
                    .iter()
                    .map(|(n, l)| (n.clone(), ext.update_feature(n, *l)))
                    .collect::<Vec<_>>()
            })
            .await;
        for (n, r) in done {
            if let Some(Err(e)) = r {
                if let Some(i) = names.iter().position(|x| *x == n) {
                    applied[i] = Err((crate::errors::extension_error_code(&e), e.to_string()));
                }
            }
        }
        EPOCH.fetch_add(1, Ordering::Relaxed);
    }
    finish(resp, applied)
}
