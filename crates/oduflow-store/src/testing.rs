//! Fresh databases for tests: a new PostgreSQL database per test (on the
//! server named by `ODUFLOW_TEST_PG`, default the local `test` database) or a
//! new SQLite file in a temporary directory. A test that needs PostgreSQL and
//! cannot reach it fails with a message saying so; it never passes silently.

use sqlx::Connection;

/// The server tests use, as a URL to an existing database on it.
pub fn pg_admin_url() -> String {
    std::env::var("ODUFLOW_TEST_PG").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Creates an empty database and returns its URL.
pub async fn fresh_pg_url() -> String {
    let admin = pg_admin_url();
    let mut conn = match sqlx::PgConnection::connect(&admin).await {
        Ok(c) => c,
        Err(e) => panic!(
            "PostgreSQL is required for this test but is not reachable at {admin} ({e}). \
             Run the suite through .ci/run, which starts one, or set ODUFLOW_TEST_PG."
        ),
    };
    let name = format!("odf_t_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .expect("CREATE DATABASE");
    let base = admin.rsplit_once('/').map(|(b, _)| b.to_owned()).unwrap_or(admin);
    format!("{base}/{name}")
}

/// A SQLite URL in `dir`.
pub fn sqlite_url(dir: &std::path::Path) -> String {
    format!("sqlite://{}", dir.join("oduflow.db").display())
}
