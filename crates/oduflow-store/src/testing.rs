//! Fresh databases for tests: a new PostgreSQL database per test (on the
//! server named by `ODUFLOW_TEST_PG`, default the local `test` database) or a
//! new SQLite file in a temporary directory. A test that needs PostgreSQL and
//! cannot reach it fails with a message saying so; it never passes silently.

use sqlx::Connection;

/// The server tests use, as a URL to an existing database on it.
pub fn pg_admin_url() -> String {
    std::env::var("ODUFLOW_TEST_PG").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Test databases older than this are left over from an earlier run (one
/// that was killed, or a test that does not drop its own): the next test to
/// create one drops them. No test runs this long.
pub const TEST_DB_STALE_SECS: u64 = 3 * 3600;

/// The prefix of every database a test creates.
pub const TEST_DB_PREFIX: &str = "odf_t_";

fn epoch_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Whether a test database's name says it is stale: `odf_t_<secs>_<hex>`
/// with `secs` older than [`TEST_DB_STALE_SECS`], or the older
/// `odf_t_<hex>` form, which no current test creates.
pub fn test_db_is_stale(name: &str, now_secs: u64) -> bool {
    let Some(rest) = name.strip_prefix(TEST_DB_PREFIX) else { return false };
    match rest.split_once('_') {
        Some((secs, _)) => secs.parse::<u64>().is_ok_and(|s| s + TEST_DB_STALE_SECS < now_secs),
        None => true,
    }
}

/// Drops the stale test databases on the server `conn` is connected to.
async fn drop_stale(conn: &mut sqlx::PgConnection) {
    let names: Vec<String> = sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'odf\\_t\\_%'")
        .fetch_all(&mut *conn)
        .await
        .unwrap_or_default();
    let now = epoch_secs();
    for name in names.iter().filter(|n| test_db_is_stale(n, now)) {
        // Names come from pg_database and match our own pattern; quoted anyway.
        let sql = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", name.replace('"', ""));
        let _ = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut *conn).await;
    }
}

/// Creates an empty database and returns its URL. Its name carries its
/// creation time, so that one left behind is dropped by a later run
/// (`scripts/test` also drops every test database when the suite ends).
pub async fn fresh_pg_url() -> String {
    let admin = pg_admin_url();
    let mut conn = match sqlx::PgConnection::connect(&admin).await {
        Ok(c) => c,
        Err(e) => panic!(
            "PostgreSQL is required for this test but is not reachable at {admin} ({e}). \
             Run the suite through .ci/run, which starts one, or set ODUFLOW_TEST_PG."
        ),
    };
    drop_stale(&mut conn).await;
    let name = format!("{TEST_DB_PREFIX}{}_{}", epoch_secs(), &uuid::Uuid::new_v4().simple().to_string()[..16]);
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

#[cfg(test)]
mod tests {
    #[test]
    fn stale_test_databases_are_told_by_their_names() {
        let now = 1_800_000_000;
        assert!(super::test_db_is_stale("odf_t_0123456789abcdef0123456789abcdef", now), "the old form");
        assert!(super::test_db_is_stale(&format!("odf_t_{}_ab12", now - 4 * 3600), now));
        assert!(!super::test_db_is_stale(&format!("odf_t_{}_ab12", now - 600), now), "a running test's");
        assert!(!super::test_db_is_stale("test", now));
        assert!(!super::test_db_is_stale("odf_fuzz_1", now));
    }
}
