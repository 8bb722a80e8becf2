//! `kmirror scram add|list`: SCRAM credentials written straight into a (stopped) broker's
//! data directory, to create the first admin user before any client can authenticate
//! (Kafka's `kafka-storage format --add-scram`). Later users are better added over the wire
//! with AlterUserScramCredentials (`kafka-configs --entity-type users`).

use std::path::PathBuf;

use kmirror_control::scram::{ScramChange, ScramMechanism, ScramRegistry, MIN_ITERATIONS};
use rand::RngCore;

#[derive(clap::Subcommand, Debug)]
pub(crate) enum ScramCommand {
    /// Add or replace a user's credential (the password is read from a file, first line).
    Add {
        #[arg(long)]
        data_dir: PathBuf,
        #[arg(long)]
        user: String,
        /// SCRAM-SHA-512 or SCRAM-SHA-256.
        #[arg(long, default_value = "SCRAM-SHA-512")]
        mechanism: String,
        /// File holding the password (its first line; never passed on the command line).
        #[arg(long)]
        password_file: PathBuf,
        #[arg(long, default_value_t = MIN_ITERATIONS)]
        iterations: i32,
    },
    /// List users and their mechanisms.
    List {
        #[arg(long)]
        data_dir: PathBuf,
    },
}

pub(crate) fn run(c: ScramCommand) -> Result<(), Box<dyn std::error::Error>> {
    match c {
        ScramCommand::Add {
            data_dir,
            user,
            mechanism,
            password_file,
            iterations,
        } => {
            let mech = ScramMechanism::from_name(&mechanism)
                .ok_or_else(|| format!("unknown SCRAM mechanism {mechanism}"))?;
            let text = std::fs::read_to_string(&password_file)
                .map_err(|e| format!("cannot read {}: {e}", password_file.display()))?;
            let password = text.lines().next().unwrap_or_default();
            if password.is_empty() {
                return Err(format!("{} holds no password", password_file.display()).into());
            }
            let mut salt = vec![0u8; 32];
            rand::thread_rng().fill_bytes(&mut salt);
            let salted = mech.salted_password(password.as_bytes(), &salt, iterations.max(1) as u32);
            let reg = ScramRegistry::open(&data_dir)?;
            let r = reg.alter(&[ScramChange::Upsert {
                user: user.clone(),
                mechanism: mech.code(),
                iterations,
                salt,
                salted_password: salted,
            }]);
            for (_, r) in r {
                r?;
            }
            println!("added {} credential for user {user}", mech.name());
            Ok(())
        }
        ScramCommand::List { data_dir } => {
            let reg = ScramRegistry::open(&data_dir)?;
            for (user, r) in reg.describe(None) {
                let infos = r?;
                let list: Vec<String> = infos
                    .iter()
                    .map(|(m, it)| format!("{}(iterations={it})", m.name()))
                    .collect();
                println!("{user}: {}", list.join(", "));
            }
            Ok(())
        }
    }
}
