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
    let registry = ctx.broker.sasl.scram.clone();
    let results = glommio::executor()
        .spawn_blocking(move || registry.alter(&changes))
        .await;
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

pub fn describe(
    ctx: &Ctx,
    req: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let users: Option<Vec<String>> = req
        .users
        .map(|us| us.iter().map(|u| u.name.to_string()).collect());
    let results = ctx
        .broker
        .sasl
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
