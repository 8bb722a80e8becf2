//! AlterUserScramCredentials (key 51) and DescribeUserScramCredentials (key 50) over the
//! broker's [`ScramRegistry`] (what `kafka-configs --entity-type users` uses).
//!
//! Alter waits for an fsync: it runs on glommio's blocking thread pool, so the engine core
//! keeps serving while the store writes. Describe reads the published snapshot.

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;
use kmirror_control::scram::ScramChange;

use crate::broker::Ctx;
use crate::errors;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

pub async fn alter(
    ctx: &Ctx,
    req: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let mut changes: Vec<ScramChange> = req
        .deletions
        .iter()
        .map(|d| ScramChange::Delete {
            user: d.name.to_string(),
            mechanism: d.mechanism,
        })
        .collect();
    changes.extend(req.upsertions.iter().map(|u| ScramChange::Upsert {
        user: u.name.to_string(),
        mechanism: u.mechanism,
        iterations: u.iterations,
        salt: u.salt.to_vec(),
        salted_password: u.salted_password.to_vec(),
    }));
    let results = {
        // The proposer derives the keys; the quorum applies Kafka's checks and the driver
        // publishes the new set into the registry before the answer comes back.
        let edits: Vec<_> = changes
            .iter()
            .map(kmirror_control::scram::ScramEdit::from_change)
            .collect();
        let users: Vec<String> = {
            let mut u: Vec<String> = Vec::new();
            for c in &changes {
                if !u.iter().any(|x| x == c.user()) {
                    u.push(c.user().to_string());
                }
            }
            u
        };
        let cmd = kmirror_control::quorum::ClusterCommand::Scram { edits };
        match ctx.cluster().propose(cmd).await {
            Ok(kmirror_control::quorum::Outcome::Scram(r)) => r,
            Ok(other) => failed(users, format!("unexpected {other:?}")),
            Err(e) => failed(users, e.to_string()),
        }
    };
    let results = results
        .into_iter()
        .map(|(user, r)| {
            let mut out = AlterUserScramCredentialsResult::default().with_user(s(&user));
            if let Err(e) = r {
                out = out
                    .with_error_code(errors::scram_error_code(&e))
                    .with_error_message(Some(s(&e.to_string())));
            }
            out
        })
        .collect();
    AlterUserScramCredentialsResponse::default().with_results(results)
}

/// Every user's result when the change could not go through the quorum.
fn failed(users: Vec<String>, why: String) -> kmirror_control::scram::AlterResults {
    users
        .into_iter()
        .map(|u| {
            let e = kmirror_control::scram::ScramError::Io(std::io::Error::other(why.clone()));
            (u, Err(e))
        })
        .collect()
}

pub fn describe(
    ctx: &Ctx,
    req: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let users: Option<Vec<String>> = req
        .users
        .map(|us| us.iter().map(|u| u.name.to_string()).collect());
    let results = ctx
        .sasl()
        .scram
        .describe(users.as_deref())
        .into_iter()
        .map(|(user, r)| {
            let out = DescribeUserScramCredentialsResult::default().with_user(s(&user));
            match r {
                Ok(infos) => out.with_credential_infos(
                    infos
                        .into_iter()
                        .map(|(m, it)| {
                            CredentialInfo::default()
                                .with_mechanism(m.code())
                                .with_iterations(it)
                        })
                        .collect(),
                ),
                Err(e) => out
                    .with_error_code(errors::scram_error_code(&e))
                    .with_error_message(Some(s(&e.to_string()))),
            }
        })
        .collect();
    DescribeUserScramCredentialsResponse::default().with_results(results)
}
