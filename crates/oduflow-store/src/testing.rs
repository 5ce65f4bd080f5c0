//! Fresh databases for tests: a new PostgreSQL database per test (on the
//! server named by `ODUFLOW_TEST_PG`, default the local `test` database) or a
//! new SQLite file in a temporary directory. A test that needs PostgreSQL and
//! cannot reach it fails with a message saying so; it never passes silently.
//!
//! A test that wants the schema gets its PostgreSQL database as a copy of a
//! template migrated once (`CREATE DATABASE ... TEMPLATE odf_tpl_<hash>`,
//! see [`fresh_migrated_pg_url`]) rather than running every migration
//! itself: about a tenth of the time.

use crate::Db;

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
        drop_named(conn, name).await;
    }
}

/// A connection to the test server's admin database, with stale test
/// databases dropped, and the server's URL without a database; panics,
/// saying what to do, when PostgreSQL is not reachable.
async fn admin_for_a_test() -> (sqlx::PgConnection, String) {
    let admin = pg_admin_url();
    let mut conn = match connect_waiting(&admin).await {
        Ok(c) => c,
        Err(e) => panic!(
            "PostgreSQL is required for this test but is not reachable at {admin} ({e}). \
             Run the suite through .ci/run, which starts one, or set ODUFLOW_TEST_PG."
        ),
    };
    drop_stale(&mut conn).await;
    let base = admin.rsplit_once('/').map(|(b, _)| b.to_owned()).unwrap_or(admin);
    (conn, base)
}

/// A new test database's name: `odf_t_<secs>_<hex>`. It carries its
/// creation time, so that one left behind is dropped by a later run
/// (`scripts/test` also drops every test database when the suite ends).
fn new_test_db_name() -> String {
    format!("{TEST_DB_PREFIX}{}_{}", epoch_secs(), &uuid::Uuid::new_v4().simple().to_string()[..16])
}

/// Creates an empty database and returns its URL: for tests of what meets
/// a database never initialized (`oduflow init`, `oduflow check`).
pub async fn fresh_pg_url() -> String {
    let (mut conn, base) = admin_for_a_test().await;
    let name = new_test_db_name();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .expect("CREATE DATABASE");
    format!("{base}/{name}")
}

/// Creates a database with every migration applied and returns its URL: a
/// copy of this build's template (built first if no process has yet, see
/// [`template_db_name`]). Migrating it again is harmless and quick.
pub async fn fresh_migrated_pg_url() -> String {
    let (mut conn, base) = admin_for_a_test().await;
    let template = ensure_template(&mut conn, &base)
        .await
        .unwrap_or_else(|e| panic!("building the migrated template database {}: {e}", template_db_name()));
    let name = new_test_db_name();
    execute_when_unused(&mut conn, &format!("CREATE DATABASE {name} TEMPLATE {}", ident(&template)))
        .await
        .unwrap_or_else(|e| panic!("CREATE DATABASE {name} TEMPLATE {template}: {e}"));
    format!("{base}/{name}")
}

/// The prefix of the migrated template databases PostgreSQL tests clone:
/// `odf_tpl_<hash of the migrations>`. One is built the first time a test
/// needs it and kept across runs: a change to the migrations names a new
/// one, so a template never lags the schema it stands for.
pub const TEMPLATE_DB_PREFIX: &str = "odf_tpl_";

/// A template under construction, `odf_tplb_<secs>_<random>`: renamed to
/// its template name once migrated, so a build that was interrupted never
/// passes for a template; a later build drops it once it is
/// [`TEMPLATE_BUILD_STALE_SECS`] old (a build takes a second or two).
pub const TEMPLATE_BUILD_PREFIX: &str = "odf_tplb_";

/// How old a template build must be before a later build takes it for
/// abandoned and drops it.
pub const TEMPLATE_BUILD_STALE_SECS: u64 = 600;

/// The advisory lock (on the admin database) held while a template is
/// built, so processes starting at once build it once.
const TEMPLATE_LOCK_KEY: i64 = 0x6f64_665f_7470_6c00;

/// How long a clone or a rename waits for sessions still leaving the
/// database it copies or renames ("being accessed by other users").
const IN_USE_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(10);

/// FNV-1a over the PostgreSQL migrations (version, name, SQL): the
/// template's name changes whenever they do.
fn migrations_hash() -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (v, d, sql) in crate::PG_MIGRATIONS {
        for bytes in [&v.to_le_bytes()[..], d.as_bytes(), &[0], sql.as_bytes(), &[0]] {
            for b in bytes {
                h ^= u64::from(*b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
    }
    h
}

/// The name of the template for this build's migrations.
pub fn template_db_name() -> String {
    format!("{TEMPLATE_DB_PREFIX}{:016x}", migrations_hash())
}

async fn db_exists(conn: &mut sqlx::PgConnection, name: &str) -> Result<bool, sqlx::Error> {
    Ok(sqlx::query_scalar::<_, i32>("SELECT 1 FROM pg_database WHERE datname = $1")
        .bind(name)
        .fetch_optional(conn)
        .await?
        .is_some())
}

/// Runs `sql` (a CREATE DATABASE ... TEMPLATE, an ALTER DATABASE ...
/// RENAME), again while the database it names still has a session leaving
/// it (SQLSTATE 55006), up to [`IN_USE_WAIT_MAX`].
async fn execute_when_unused(conn: &mut sqlx::PgConnection, sql: &str) -> Result<(), sqlx::Error> {
    let started = std::time::Instant::now();
    loop {
        match sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())).execute(&mut *conn).await {
            Err(sqlx::Error::Database(e))
                if e.code().as_deref() == Some("55006") && started.elapsed() < IN_USE_WAIT_MAX =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            r => return r.map(|_| ()),
        }
    }
}

/// The migrated template, built if it does not exist yet: under the
/// advisory lock, as `odf_tplb_...`, migrated, its pool closed (a clone
/// needs the template without sessions), then renamed to its name.
async fn ensure_template(conn: &mut sqlx::PgConnection, base: &str) -> KitResult<String> {
    let name = template_db_name();
    if db_exists(conn, &name).await? {
        return Ok(name);
    }
    sqlx::query("SELECT pg_advisory_lock($1)").bind(TEMPLATE_LOCK_KEY).execute(&mut *conn).await?;
    let built = build_template(conn, base, &name).await;
    let unlocked = sqlx::query("SELECT pg_advisory_unlock($1)").bind(TEMPLATE_LOCK_KEY).execute(&mut *conn).await;
    built?;
    unlocked?;
    Ok(name)
}

/// [`ensure_template`]'s build, under the lock.
async fn build_template(conn: &mut sqlx::PgConnection, base: &str, name: &str) -> KitResult<()> {
    if db_exists(conn, name).await? {
        return Ok(()); // built by another process while this one waited
    }
    // What an interrupted build left; not a build under way elsewhere (a
    // run on the same server whose admin database, and so whose lock, is
    // another): that one is young.
    let left: Vec<String> = sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'odf\\_tplb\\_%'")
        .fetch_all(&mut *conn)
        .await?;
    let now = epoch_secs();
    for l in left.iter().filter(|l| template_build_is_stale(l, now)) {
        drop_named(conn, l).await;
    }
    let building =
        format!("{TEMPLATE_BUILD_PREFIX}{}_{}", epoch_secs(), &uuid::Uuid::new_v4().simple().to_string()[..16]);
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {}", ident(&building)))).execute(&mut *conn).await?;
    let store = Store::connect_sized(&format!("{base}/{building}"), true, 1).await?;
    let migrated = store.migrate().await;
    store.close().await;
    migrated?;
    execute_when_unused(conn, &format!("ALTER DATABASE {} RENAME TO {}", ident(&building), ident(name))).await?;
    Ok(())
}

/// Whether a template build's name says it was abandoned: started more
/// than [`TEMPLATE_BUILD_STALE_SECS`] ago, or a name this kit never makes.
pub fn template_build_is_stale(name: &str, now_secs: u64) -> bool {
    let Some(rest) = name.strip_prefix(TEMPLATE_BUILD_PREFIX) else { return false };
    match rest.split_once('_') {
        Some((secs, _)) => secs.parse::<u64>().map_or(true, |s| s + TEMPLATE_BUILD_STALE_SECS < now_secs),
        None => true,
    }
}

/// A SQLite URL in `dir`.
pub fn sqlite_url(dir: &std::path::Path) -> String {
    format!("sqlite://{}", dir.join("oduflow.db").display())
}

/// A fresh database for one test, on either backend, dropped with it: the
/// SQLite file's directory is removed, the PostgreSQL database dropped.
#[derive(Debug)]
pub struct TestDb {
    pub backend: crate::Backend,
    pub url: String,
    /// Where a test may keep files beside the database (SQLite's directory).
    pub dir: tempfile::TempDir,
}

impl TestDb {
    /// A database never initialized: on SQLite a file not yet created, on
    /// PostgreSQL an empty database.
    pub async fn new(backend: crate::Backend) -> TestDb {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = match backend {
            crate::Backend::Sqlite => sqlite_url(dir.path()),
            crate::Backend::Postgres => fresh_pg_url().await,
        };
        TestDb { backend, url, dir }
    }

    /// A database for a test that migrates it before anything else ([`TestDb::store`],
    /// `Store::migrate`): on PostgreSQL a copy of the migrated template
    /// ([`fresh_migrated_pg_url`]), on SQLite as [`TestDb::new`] (its
    /// migrations take a few milliseconds).
    pub async fn migrated(backend: crate::Backend) -> TestDb {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = match backend {
            crate::Backend::Sqlite => sqlite_url(dir.path()),
            crate::Backend::Postgres => fresh_migrated_pg_url().await,
        };
        TestDb { backend, url, dir }
    }

    /// Its store, migrated.
    pub async fn store(&self) -> Store {
        let store = Store::connect(&self.url, true).await.expect("connect to the test database");
        store.migrate().await.expect("migrate the test database");
        store
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if self.backend != crate::Backend::Postgres {
            return;
        }
        // Drop runs outside any async context we could block: a thread of
        // its own with a small runtime.
        let url = self.url.clone();
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() {
                rt.block_on(drop_pg_database(&url));
            }
        })
        .join();
    }
}

/// What a test body returns: nothing, or a `Result` whose error fails it.
pub trait TestOutcome {
    fn check(self);
}

impl TestOutcome for () {
    fn check(self) {}
}

impl<E: std::fmt::Debug> TestOutcome for Result<(), E> {
    fn check(self) {
        if let Err(e) = self {
            panic!("{e:?}");
        }
    }
}

/// One test body on both stores, for every test binary:
/// `on_both_stores!(super::fixture => name_a, name_b);` makes `mod name_a {
/// sqlite(), postgres() }`. Each makes a fresh [`TestDb`], builds the
/// binary's fixture from it (`super::fixture(&db).await`: a store, an
/// environment), runs `super::name_a(fixture)`, and drops the database once
/// the body is done. A body may return `()` or a `Result`.
///
/// `on_both_stores!(migrated super::fixture => ...)`: the database is
/// [`TestDb::migrated`] (PostgreSQL: a copy of the migrated template), for
/// fixtures that migrate it anyway; without `migrated` it is
/// [`TestDb::new`], never initialized.
#[macro_export]
macro_rules! on_both_stores {
    (@with $make:ident, $fixture:path => $($name:ident),+) => {
        $(mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let db = $crate::testing::TestDb::$make($crate::Backend::Sqlite).await;
                let f = $fixture(&db).await;
                $crate::testing::TestOutcome::check(super::$name(f).await);
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let db = $crate::testing::TestDb::$make($crate::Backend::Postgres).await;
                let f = $fixture(&db).await;
                $crate::testing::TestOutcome::check(super::$name(f).await);
            }
        })+
    };
    (migrated $fixture:path => $($name:ident),+ $(,)?) => {
        $crate::on_both_stores!(@with migrated, $fixture => $($name),+);
    };
    ($fixture:path => $($name:ident),+ $(,)?) => {
        $crate::on_both_stores!(@with new, $fixture => $($name),+);
    };
}

// ---- The test kit's database tooling (the tidy test's rule: the only SQL outside the
// store's own modules lives here, so campaign, benchmarks and tests reach no
// backend directly). ----

use crate::Store;

/// What the kit's helpers fail with (converts into `anyhow::Error`).
pub type KitResult<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', ""))
}

async fn admin() -> KitResult<sqlx::PgConnection> {
    Ok(connect_waiting(&pg_admin_url()).await?)
}

/// How long a test waits for a PostgreSQL server that is at its connection
/// limit. The suite runs three PostgreSQL campaigns beside the other tests,
/// and their bursts can fill the server's 100 connections for some seconds;
/// the pools wait 30 s on the same error (sqlx counts it transient), so the
/// kit's own connections do too.
const SERVER_FULL_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(60);

/// One connection, waiting while the server is full (see
/// [`crate::pg_connect_waiting`]), up to `SERVER_FULL_WAIT_MAX`.
async fn connect_waiting(url: &str) -> Result<sqlx::PgConnection, sqlx::Error> {
    crate::pg_connect_waiting(url, SERVER_FULL_WAIT_MAX).await
}

async fn current_database(p: &sqlx::PgPool) -> KitResult<String> {
    Ok(sqlx::query_scalar("SELECT current_database()").fetch_one(p).await?)
}

/// The test server's version, e.g. "PostgreSQL 15.20 (Debian ...)".
pub async fn pg_version() -> KitResult<String> {
    let v: String = sqlx::query_scalar("SELECT version()").fetch_one(&mut admin().await?).await?;
    Ok(v.split(" on ").next().unwrap_or(&v).to_owned())
}

/// Drops the PostgreSQL database at `url` (a test's or a benchmark's).
pub async fn drop_pg_database(url: &str) {
    let Some((_, name)) = url.rsplit_once('/') else { return };
    if let Ok(mut c) = admin().await {
        drop_named(&mut c, name).await;
    }
}

/// Drops the database `name`, its sessions and all (best effort: a test's
/// clean-up never fails the test).
async fn drop_named(admin: &mut sqlx::PgConnection, name: &str) {
    let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", ident(name));
    let _ = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(admin).await;
}

/// Terminates every session on the database `name` but the caller's own;
/// how many.
async fn terminate_sessions(admin: &mut sqlx::PgConnection, name: &str) -> KitResult<usize> {
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
    )
    .bind(name)
    .fetch_all(admin)
    .await?;
    Ok(killed.len())
}

/// Closes `store` and, on PostgreSQL, drops its database.
pub async fn close_and_drop(store: &Store) {
    let Db::Pg(p, _) = &store.db else { return };
    let Ok(name) = current_database(p).await else { return };
    p.close().await;
    if let Ok(mut c) = admin().await {
        drop_named(&mut c, &name).await;
    }
}

/// Rows in `table` (a name from the schema, never input).
pub async fn table_count(store: &Store, table: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {}", ident(table));
    let n: Result<i64, sqlx::Error> =
        crate::both!(store, p => sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(p).await);
    n.unwrap_or_else(|e| panic!("count of {table}: {e}"))
}

/// The count a `SELECT count(*) ...` of a test's own reads.
pub async fn count_raw(store: &Store, sql: &str) -> i64 {
    let q = sqlx::AssertSqlSafe(sql.to_owned());
    let n: Result<i64, sqlx::Error> = crate::both!(store, p => sqlx::query_scalar(q).fetch_one(p).await);
    n.unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Runs one statement as it is, and says whether the database accepted it:
/// for tests that prove the schema refuses what it must (a receipt's
/// `TRUNCATE`, `INSERT OR REPLACE`).
pub async fn execute_raw(store: &Store, sql: &str) -> Result<(), String> {
    let sql = sqlx::AssertSqlSafe(sql.to_owned());
    crate::both!(store, p => sqlx::query(sql).execute(p).await.map(|_| ()).map_err(|e| e.to_string()))
}

/// SQLite: copies the write-ahead log into the database file (`FULL`: it
/// waits for the writer under way), and says whether every frame was
/// copied (no reader held one back). PostgreSQL: nothing to do, `true`.
pub async fn sqlite_checkpoint(store: &Store) -> KitResult<bool> {
    let Db::Sqlite(p) = &store.db else { return Ok(true) };
    let (busy, log, copied): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(FULL)").fetch_one(p).await?;
    Ok(busy == 0 && log == copied)
}

/// Runs one statement as it is on a connection of its own, opened the way
/// any other program opens the file (SQLite: the `sqlite3` shell or a
/// maintenance script, without the store's `recursive_triggers`), and says
/// whether the database accepted it: the file itself must refuse what the
/// receipts' guards forbid. PostgreSQL: as `execute_raw`.
pub async fn execute_raw_elsewhere(store: &Store, sql: &str) -> Result<(), String> {
    use sqlx::Connection;
    let Db::Sqlite(p) = &store.db else { return execute_raw(store, sql).await };
    let path = p.connect_options().get_filename().to_owned();
    let opts = sqlx::sqlite::SqliteConnectOptions::new().filename(path);
    let mut c = sqlx::SqliteConnection::connect_with(&opts).await.map_err(|e| e.to_string())?;
    let r = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())).execute(&mut c).await;
    let _ = c.close().await;
    r.map(|_| ()).map_err(|e| e.to_string())
}

/// Forgets every migration after `version`, so the database reads as one an
/// older oduflow migrated (`oduflow check` and every command must then name
/// `oduflow init`). The tables stay as they are.
pub async fn schema_rewind(store: &Store, version: i64) -> KitResult<()> {
    crate::both!(store, p => {
        sqlx::query("DELETE FROM _sqlx_migrations WHERE version > $1").bind(version).execute(p).await?;
    });
    Ok(())
}

/// Moves the client's generation on as another writer would (a `client
/// delete` landing mid-run), unless the record is locked: PostgreSQL gives
/// up after [`BUMP_LOCK_TIMEOUT_MS`] on a claim's row lock. Whether it moved.
pub async fn try_bump_generation(store: &Store, client: &oduflow_model::ClientId) -> KitResult<bool> {
    let bump = "UPDATE infra SET generation = generation + 1 WHERE client_id = $1";
    match &store.db {
        Db::Pg(p, _) => {
            let mut tx = p.begin().await?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("SET LOCAL lock_timeout = '{BUMP_LOCK_TIMEOUT_MS}ms'")))
                .execute(&mut *tx)
                .await?;
            match sqlx::query(bump).bind(client.as_str()).execute(&mut *tx).await {
                Ok(_) => tx.commit().await.map(|_| true).map_err(Into::into),
                Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55P03") => Ok(false),
                Err(e) => Err(e.into()),
            }
        }
        Db::Sqlite(p) => Ok(sqlx::query(bump).bind(client.as_str()).execute(p).await?.rows_affected() == 1),
    }
}

/// How long [`try_bump_generation`] waits for a row lock on PostgreSQL.
pub const BUMP_LOCK_TIMEOUT_MS: u64 = 300;

/// PostgreSQL: `VACUUM ANALYZE` of these tables (a benchmark's setup leaves
/// dead rows a production queue's autovacuum would have cleared).
pub async fn vacuum_analyze(store: &Store, tables: &[&str]) -> KitResult<()> {
    if let Db::Pg(p, _) = &store.db {
        let list: Vec<String> = tables.iter().map(|t| ident(t)).collect();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("VACUUM ANALYZE {}", list.join(", ")))).execute(p).await?;
    }
    Ok(())
}

/// PostgreSQL: a table shaped like a queue row, for pgbench's ceiling run.
pub async fn create_ceiling_table(url: &str) -> KitResult<()> {
    let mut c = connect_waiting(url).await?;
    sqlx::query(
        "CREATE TABLE ceiling (id bigserial PRIMARY KEY, kind text NOT NULL, payload jsonb NOT NULL, \
         created_at timestamptz NOT NULL DEFAULT now())",
    )
    .execute(&mut c)
    .await?;
    Ok(())
}

/// SQLite: whether some run holds this client's lock file now (a stopped
/// worker's run holds it until it resumes). PostgreSQL: false.
pub fn sqlite_client_locked(store: &Store, client: &oduflow_model::ClientId) -> KitResult<bool> {
    let Db::Sqlite(p) = &store.db else { return Ok(false) };
    let dir = crate::queue::claim_sqlite::sqlite_lock_dir(p)?;
    Ok(crate::queue::claim_sqlite::try_lock_client(&dir, client)?.is_none())
}

/// SQLite: (lease owner, client name) of every client whose lease is held.
/// PostgreSQL keeps no lease owner in the table (its claims are row locks).
pub async fn sqlite_lease_holders(store: &Store) -> KitResult<Vec<(String, String)>> {
    match &store.db {
        Db::Sqlite(p) => Ok(sqlx::query_as(
            "SELECT i.lease_owner, c.name FROM infra i JOIN clients c ON c.id = i.client_id \
             WHERE i.lease_owner IS NOT NULL",
        )
        .fetch_all(p)
        .await?),
        Db::Pg(..) => Ok(vec![]),
    }
}

/// PostgreSQL: terminates every session of this database that sits idle in
/// a transaction (a claim's connection, say); how many. SQLite: none.
pub async fn terminate_idle_in_transaction(store: &Store) -> KitResult<u64> {
    let Db::Pg(p, _) = &store.db else { return Ok(0) };
    let db = current_database(p).await?;
    let n: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = $1 AND state = 'idle in transaction' AND pid <> pg_backend_pid()",
    )
    .bind(&db)
    .fetch_all(p)
    .await?;
    Ok(n.len() as u64)
}

/// PostgreSQL: the server's client sessions now (every database), and its
/// `max_connections`; `None` on SQLite.
pub async fn pg_sessions(store: &Store) -> KitResult<Option<(i64, i64)>> {
    let Db::Pg(p, _) = &store.db else { return Ok(None) };
    let used: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'")
        .fetch_one(p)
        .await?;
    let max: String = sqlx::query_scalar("SHOW max_connections").fetch_one(p).await?;
    Ok(Some((used, max.parse().unwrap_or(100))))
}

/// PostgreSQL: terminates one session, and waits (bounded) until it is gone.
pub async fn pg_terminate(store: &Store, pid: i32) -> KitResult<()> {
    let Db::Pg(p, _) = &store.db else { return Ok(()) };
    sqlx::query_scalar::<_, bool>("SELECT pg_terminate_backend($1)").bind(pid).fetch_one(p).await?;
    for _ in 0..200 {
        let left: Option<i32> =
            sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE pid = $1").bind(pid).fetch_optional(p).await?;
        if left.is_none() {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    Err(format!("session {pid} still there 2 s after pg_terminate_backend").into())
}

/// SQLite: whether another connection holds the file's write lock now
/// (tries `BEGIN IMMEDIATE` without waiting).
pub async fn sqlite_write_locked(store: &Store) -> KitResult<bool> {
    let Db::Sqlite(p) = &store.db else { return Ok(false) };
    let mut c = p.acquire().await?;
    sqlx::query("PRAGMA busy_timeout = 0").execute(&mut *c).await?;
    let r = sqlx::query("BEGIN IMMEDIATE").execute(&mut *c).await;
    if r.is_ok() {
        sqlx::query("ROLLBACK").execute(&mut *c).await?;
    }
    sqlx::query("PRAGMA busy_timeout = 30000").execute(&mut *c).await?;
    Ok(r.is_err())
}

/// Copies the database (an "older backup"); returns where the copy is.
pub async fn snapshot(store: &Store, dir: &std::path::Path) -> KitResult<String> {
    match &store.db {
        Db::Sqlite(p) => {
            let path = dir.join("snapshot.db");
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "VACUUM INTO '{}'",
                path.display().to_string().replace('\'', "''")
            )))
            .execute(p)
            .await?;
            Ok(path.display().to_string())
        }
        Db::Pg(p, _) => {
            let name = current_database(p).await?;
            let snap = format!("{name}_snap");
            let mut admin = admin().await?;
            // CREATE DATABASE ... TEMPLATE needs no other session on the source.
            let sql = format!("CREATE DATABASE {} TEMPLATE {}", ident(&snap), ident(&name));
            without_sessions(&mut admin, &name, &sql).await?;
            Ok(snap)
        }
    }
}

/// Runs `sql` (a copy or a drop of database `name`) once its sessions are
/// ended: workers still running reconnect between the two, so it ends them
/// again while the server says the database is in use (SQLSTATE 55006), up
/// to [`IN_USE_WAIT_MAX`].
async fn without_sessions(admin: &mut sqlx::PgConnection, name: &str, sql: &str) -> KitResult<()> {
    let started = std::time::Instant::now();
    loop {
        terminate_sessions(admin, name).await?;
        match sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())).execute(&mut *admin).await {
            Err(sqlx::Error::Database(e))
                if e.code().as_deref() == Some("55006") && started.elapsed() < IN_USE_WAIT_MAX => {}
            r => return Ok(r.map(drop)?),
        }
    }
}

/// Puts the copy back in place of the live database (`store` is closed).
pub async fn restore(store: &Store, url: &str, snap: &str) -> KitResult<()> {
    match &store.db {
        Db::Sqlite(p) => {
            p.close().await;
            let path = url.trim_start_matches("sqlite://");
            for ext in ["-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{path}{ext}"));
            }
            std::fs::copy(snap, path)?;
        }
        Db::Pg(p, _) => {
            let name = current_database(p).await?;
            p.close().await;
            let mut admin = admin().await?;
            without_sessions(&mut admin, &name, &format!("DROP DATABASE {}", ident(&name))).await?;
            let sql = format!("ALTER DATABASE {} RENAME TO {}", ident(snap), ident(&name));
            sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut admin).await?;
        }
    }
    Ok(())
}

/// PostgreSQL: sessions of this database idle in a transaction whose last
/// statement starts with `query_prefix` (a job's main transaction stopped at
/// its commit, say).
pub async fn pg_idle_in_transaction_after(store: &Store, query_prefix: &str) -> KitResult<usize> {
    let Db::Pg(p, _) = &store.db else { return Ok(0) };
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND state = 'idle in transaction' AND pid <> pg_backend_pid() AND starts_with(query, $1)",
    )
    .bind(query_prefix)
    .fetch_one(p)
    .await?;
    Ok(n as usize)
}

/// PostgreSQL: the pids of this database's sessions idle in a transaction.
pub async fn pg_idle_in_transaction_pids(store: &Store) -> KitResult<Vec<i32>> {
    let Db::Pg(p, _) = &store.db else { return Ok(vec![]) };
    Ok(sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity \
         WHERE datname = current_database() AND state = 'idle in transaction' AND pid <> pg_backend_pid()",
    )
    .fetch_all(p)
    .await?)
}

/// PostgreSQL: terminates every session of the database at `url` (from the
/// admin database); how many.
pub async fn pg_terminate_all_sessions(url: &str) -> KitResult<usize> {
    let db = url.rsplit_once('/').map(|(_, d)| d).unwrap_or_default();
    terminate_sessions(&mut admin().await?, db).await
}

/// PostgreSQL: lets the database at `url` accept connections or not
/// (`ALTER DATABASE ... ALLOW_CONNECTIONS`, from the admin database); when
/// not, its sessions are terminated too, so it is down for every client:
/// a new connection is refused with SQLSTATE 55000.
pub async fn pg_allow_connections(url: &str, allow: bool) -> KitResult<()> {
    let db = url.rsplit_once('/').map(|(_, d)| d).unwrap_or_default();
    let db = db.split('?').next().unwrap_or_default();
    let mut admin = admin().await?;
    let sql = format!("ALTER DATABASE {} ALLOW_CONNECTIONS {allow}", ident(db));
    sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut admin).await?;
    if !allow {
        terminate_sessions(&mut admin, db).await?;
    }
    Ok(())
}

/// Every (table, column) of the schema, sorted, for the migration parity
/// check (the two backends' migrations must build the same tables).
pub async fn schema_columns(store: &Store) -> KitResult<Vec<(String, String)>> {
    let mut cols: Vec<(String, String)> = match &store.db {
        Db::Pg(p, _) => {
            sqlx::query_as(
                "SELECT table_name::text, column_name::text FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name <> '_sqlx_migrations'",
            )
            .fetch_all(p)
            .await?
        }
        Db::Sqlite(p) => {
            sqlx::query_as(
                "SELECT m.name, c.name FROM sqlite_master m, pragma_table_info(m.name) c \
                 WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND m.name <> '_sqlx_migrations'",
            )
            .fetch_all(p)
            .await?
        }
    };
    cols.sort();
    Ok(cols)
}

/// Every value of every column of every table, as text, one per line: for
/// tests that prove a secret was never stored anywhere.
pub async fn all_text(store: &Store) -> KitResult<String> {
    all_text_but(store, &[]).await
}

/// As [`all_text`], leaving out the tables `skip` names.
pub async fn all_text_but(store: &Store, skip: &[&str]) -> KitResult<String> {
    let mut out = String::new();
    for (table, col) in schema_columns(store).await?.into_iter().filter(|(t, _)| !skip.contains(&t.as_str())) {
        let sql = match &store.db {
            Db::Pg(..) => format!("SELECT string_agg(CAST({} AS text), E'\\n') FROM {}", ident(&col), ident(&table)),
            Db::Sqlite(_) => {
                format!("SELECT group_concat(CAST({} AS TEXT), char(10)) FROM {}", ident(&col), ident(&table))
            }
        };
        let v: Option<String> =
            crate::both!(store, p => sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(p).await)?;
        out.push_str(&v.unwrap_or_default());
        out.push('\n');
    }
    Ok(out)
}

/// PostgreSQL: an event inserted by a transaction left open (its id drawn,
/// nothing committed), for the feed's test of a commit that lands after a
/// later id's. `None` on SQLite, whose writers commit one at a time.
pub struct HeldEvent(sqlx::Transaction<'static, sqlx::Postgres>);

impl HeldEvent {
    pub async fn commit(self) -> KitResult<()> {
        self.0.commit().await?;
        Ok(())
    }
}

/// See [`HeldEvent`].
pub async fn pg_event_held_open(store: &Store, kind: oduflow_model::EventKind) -> KitResult<Option<HeldEvent>> {
    let Db::Pg(p, _) = &store.db else { return Ok(None) };
    let mut tx = p.begin().await?;
    sqlx::query("INSERT INTO events (client_ref, kind, detail, at_ms) VALUES (NULL, $1, '{}', 0)")
        .bind(kind.as_str())
        .execute(&mut *tx)
        .await?;
    Ok(Some(HeldEvent(tx)))
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
        assert!(!super::test_db_is_stale(&super::template_db_name(), now), "a template is no test database");
    }

    #[test]
    fn the_template_is_named_by_the_migrations() {
        let name = super::template_db_name();
        assert!(name.starts_with(super::TEMPLATE_DB_PREFIX) && name.len() == 8 + 16, "{name}");
        assert_eq!(name, super::template_db_name(), "the same migrations, the same name");
        let now = 1_800_000_000;
        assert!(super::template_build_is_stale(&format!("odf_tplb_{}_ab12", now - 3600), now));
        assert!(!super::template_build_is_stale(&format!("odf_tplb_{}_ab12", now - 5), now), "under way");
        assert!(!super::template_build_is_stale(&name, now), "a finished template");
    }
}
