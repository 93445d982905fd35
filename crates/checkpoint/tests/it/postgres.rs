//! The conformance suite on the PostgreSQL saver, one fresh schema per test.
//!
//! Without `DATABASE_URL` every test skips visibly (a line on stderr); under `CI=true`
//! a missing `DATABASE_URL` fails instead, so CI always runs them against a real server.

use antler_checkpoint::{PostgresOptions, PostgresSaver, StoreConfig};

/// The server URL, or `None` (skip) outside CI; panics under `CI=true` without one.
pub(crate) fn database_url() -> Option<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "DATABASE_URL is unset under CI=true: the PostgreSQL tests must run, not skip"
            );
            eprintln!("SKIPPED: PostgreSQL test (DATABASE_URL is unset)");
            None
        }
    }
}

/// A saver on a fresh schema of its own.
pub(crate) async fn fresh(config: StoreConfig) -> Option<(PostgresSaver, PostgresOptions)> {
    let url = database_url()?;
    let schema = format!("antler_test_{}", uuid::Uuid::new_v4().simple());
    let options = PostgresOptions::new(url)
        .with_schema(schema)
        .with_pool_size(2);
    let saver = PostgresSaver::connect(options.clone(), config)
        .await
        .expect("connect to DATABASE_URL");
    Some((saver, options))
}

mod suite {
    use antler_checkpoint::{Saver, StoreConfig};

    antler_checkpoint::conformance_suite!(|| async {
        super::fresh(StoreConfig::full())
            .await
            .map(|(s, _)| Box::new(s) as Box<dyn Saver>)
    });
}
