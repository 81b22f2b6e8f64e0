//! The standard questions, each one SQL query, kept here as text: what `--sql` prints, what the
//! embedded engine runs, and what the tests give DuckDB and Spark unchanged.
//!
//! The text is portable between DataFusion, DuckDB and Spark SQL, with one dialect note: time is
//! read with Spark's `unix_micros(captured_at)` (microseconds since the epoch, BIGINT), which the
//! embedded engine registers (`crate::tables`) and DuckDB defines as a macro of its `epoch_us`.
//! The rest keeps to what the three engines agree on: every division is of DOUBLEs (DataFusion
//! truncates integer division, DuckDB and Spark do not), medians are of DOUBLEs (DataFusion
//! keeps an integer median integral), decimal literals are cast to DOUBLE (DuckDB and Spark read
//! `1.5` as a DECIMAL), NULLs are placed explicitly, and every ordering ends on a unique key. Rates
//! are computed from a host's first and last snapshot, with one division each, so the three
//! engines compute the same DOUBLE bit for bit (a regression's sums would depend on their order).

/// What `fleet growth --by` groups by: a grouping of the `groups` table or the dominator paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    Type,
    Site,
    Root,
    Kind,
    Path,
}

impl By {
    pub const ALL: [By; 5] = [By::Type, By::Site, By::Root, By::Kind, By::Path];

    pub fn name(self) -> &'static str {
        match self {
            By::Type => "type",
            By::Site => "site",
            By::Root => "root",
            By::Kind => "kind",
            By::Path => "path",
        }
    }

    pub fn parse(text: &str) -> Option<By> {
        By::ALL.into_iter().find(|by| by.name() == text)
    }

    /// The table the grouping's rows come from.
    pub fn table(self) -> &'static str {
        match self {
            By::Path => "dominator_paths",
            _ => "groups",
        }
    }

    /// The rows being grouped, as `snapshot_id, key, name, retained_bytes`.
    fn items(self) -> String {
        match self {
            By::Path => "SELECT snapshot_id, key, signature AS name, retained_bytes FROM dominator_paths".to_string(),
            by => format!("SELECT snapshot_id, key, name, retained_bytes FROM groups WHERE grouping = '{}'", by.name()),
        }
    }
}

/// Every snapshot with its host, its time in microseconds, its place in its host's series
/// (`nth` from the oldest, `newest` from the latest) and the number of snapshots of its host.
const SNAPSHOTS: &str = "\
snaps AS (
  SELECT snapshot_id,
         COALESCE(host, '') AS host,
         reachable_bytes,
         unix_micros(captured_at) AS micros,
         ROW_NUMBER() OVER (PARTITION BY COALESCE(host, '') ORDER BY captured_at, snapshot_id) AS nth,
         ROW_NUMBER() OVER (PARTITION BY COALESCE(host, '') ORDER BY captured_at DESC, snapshot_id DESC) AS newest,
         COUNT(*) OVER (PARTITION BY COALESCE(host, '')) AS host_snapshots
  FROM snapshots
)";

/// Growth: per host and key, the retained bytes in the host's first and last snapshot (0 where
/// the key is absent) and their difference per hour; then per key across the hosts where it
/// appears. Largest total growth first; only keys that grew on at least one host.
const GROWTH: &str = "\
-- heapsnap fleet growth --by {by}: what grows, per key, on each host and across the fleet
WITH {snapshots},
spans AS (
  SELECT host, MAX(micros) - MIN(micros) AS span_micros
  FROM snaps
  GROUP BY host
),
fleet AS (
  SELECT COUNT(*) AS fleet_hosts FROM spans
),
items AS (
  {items}
),
per_host AS (
  SELECT s.host,
         i.key,
         MIN(i.name) AS name,
         SUM(CASE WHEN s.nth = 1 THEN i.retained_bytes ELSE 0 END) AS first_bytes,
         SUM(CASE WHEN s.newest = 1 THEN i.retained_bytes ELSE 0 END) AS last_bytes
  FROM items i
  JOIN snaps s ON i.snapshot_id = s.snapshot_id
  WHERE s.nth = 1 OR s.newest = 1
  GROUP BY s.host, i.key
),
rates AS (
  SELECT p.key,
         p.name,
         p.last_bytes,
         p.last_bytes - p.first_bytes AS growth,
         CASE WHEN sp.span_micros > 0
              THEN CAST(p.last_bytes - p.first_bytes AS DOUBLE) * CAST(3600000000 AS DOUBLE) / CAST(sp.span_micros AS DOUBLE)
         END AS per_hour
  FROM per_host p
  JOIN spans sp ON p.host = sp.host
)
SELECT r.key,
       MIN(r.name) AS name,
       SUM(r.growth) AS growth_bytes,
       MEDIAN(CAST(r.growth AS DOUBLE)) AS median_growth_bytes,
       CAST(ROUND(MEDIAN(r.per_hour), 0) AS BIGINT) AS median_bytes_per_hour,
       SUM(r.last_bytes) AS retained_bytes,
       SUM(CASE WHEN r.growth > 0 THEN 1 ELSE 0 END) AS hosts_growing,
       COUNT(*) AS hosts,
       MAX(f.fleet_hosts) AS fleet_hosts
FROM rates r
CROSS JOIN fleet f
GROUP BY r.key
HAVING MAX(r.growth) > 0
ORDER BY growth_bytes DESC, r.key
{limit}";

/// Divergence: each host's growth of reachable bytes per hour (first to last snapshot) against
/// the fleet's median, in units of the median absolute deviation (a robust z-score, 1.4826 MAD
/// being the standard deviation of normal data); the scale is never under 5% of the median
/// rate or 1 MiB an hour, so that a fleet of equal hosts has no outlier. Fastest growing
/// against the fleet first; `diverges` at a score of 3.5 or more either way.
const DIVERGE: &str = "\
-- heapsnap fleet diverge: which hosts' reachable bytes grow unlike the fleet's
WITH {snapshots},
per_host AS (
  SELECT host,
         MAX(host_snapshots) AS snapshot_count,
         SUM(CASE WHEN nth = 1 THEN reachable_bytes ELSE 0 END) AS first_reachable_bytes,
         SUM(CASE WHEN newest = 1 THEN reachable_bytes ELSE 0 END) AS last_reachable_bytes,
         MAX(micros) - MIN(micros) AS span_micros
  FROM snaps
  GROUP BY host
),
rates AS (
  SELECT host,
         snapshot_count,
         first_reachable_bytes,
         last_reachable_bytes,
         CASE WHEN span_micros > 0
              THEN CAST(last_reachable_bytes - first_reachable_bytes AS DOUBLE) * CAST(3600000000 AS DOUBLE) / CAST(span_micros AS DOUBLE)
         END AS per_hour
  FROM per_host
),
centre AS (
  SELECT MEDIAN(per_hour) AS median_per_hour FROM rates
),
spread AS (
  SELECT MEDIAN(ABS(r.per_hour - c.median_per_hour)) AS mad
  FROM rates r
  CROSS JOIN centre c
),
scored AS (
  SELECT r.host,
         r.snapshot_count,
         r.first_reachable_bytes,
         r.last_reachable_bytes,
         r.per_hour,
         c.median_per_hour,
         ROUND((r.per_hour - c.median_per_hour)
               / GREATEST(CAST(1.4826 AS DOUBLE) * d.mad,
                          CAST(0.05 AS DOUBLE) * ABS(c.median_per_hour),
                          CAST(1048576 AS DOUBLE)), 2) AS score
  FROM rates r
  CROSS JOIN centre c
  CROSS JOIN spread d
)
SELECT host,
       snapshot_count,
       first_reachable_bytes,
       last_reachable_bytes,
       CAST(ROUND(per_hour, 0) AS BIGINT) AS bytes_per_hour,
       CAST(ROUND(median_per_hour, 0) AS BIGINT) AS fleet_median_bytes_per_hour,
       score,
       CASE WHEN ABS(score) >= 3.5 THEN TRUE ELSE FALSE END AS diverges
FROM scored
ORDER BY score DESC NULLS LAST, host
{limit}";

/// Common suspects: the leak suspects of each host's latest snapshot, by the key of their
/// dominator path, kept when more than half of the hosts have them; on most hosts first, then
/// by retained bytes.
const SUSPECTS: &str = "\
-- heapsnap fleet suspects: the leak suspects that most hosts' latest snapshots share
WITH {snapshots},
latest AS (
  SELECT snapshot_id, host FROM snaps WHERE newest = 1
),
fleet AS (
  SELECT COUNT(*) AS fleet_hosts FROM latest
),
found AS (
  SELECT l.host,
         s.key,
         MIN(s.type) AS type,
         MIN(s.kind) AS kind,
         MIN(s.signature) AS signature,
         SUM(s.retained_bytes) AS retained_bytes,
         MIN(s.rank) AS suspect_rank
  FROM suspects s
  JOIN latest l ON s.snapshot_id = l.snapshot_id
  GROUP BY l.host, s.key
)
SELECT f.key,
       MIN(f.type) AS type,
       MIN(f.kind) AS kind,
       MIN(f.signature) AS signature,
       SUM(f.retained_bytes) AS retained_bytes,
       MEDIAN(CAST(f.retained_bytes AS DOUBLE)) AS median_retained_bytes,
       MIN(f.suspect_rank) AS best_rank,
       COUNT(*) AS hosts,
       MAX(fl.fleet_hosts) AS fleet_hosts
FROM found f
CROSS JOIN fleet fl
GROUP BY f.key
HAVING COUNT(*) * 2 > MAX(fl.fleet_hosts)
ORDER BY hosts DESC, retained_bytes DESC, f.key
{limit}";

/// One of the standard questions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Question {
    /// What grows, per key of a grouping.
    Growth(By),
    /// Which hosts diverge from the fleet.
    Diverge,
    /// The leak suspects most hosts share.
    Suspects,
}

impl Question {
    pub fn name(self) -> &'static str {
        match self {
            Question::Growth(_) => "growth",
            Question::Diverge => "diverge",
            Question::Suspects => "suspects",
        }
    }

    /// The tables the query reads.
    pub fn tables(self) -> &'static [&'static str] {
        match self {
            Question::Growth(By::Path) => &["snapshots", "dominator_paths"],
            Question::Growth(_) => &["snapshots", "groups"],
            Question::Diverge => &["snapshots"],
            Question::Suspects => &["snapshots", "suspects"],
        }
    }

    /// The query's text, with at most `limit` rows (0: all).
    pub fn sql(self, limit: usize) -> String {
        let limit = if limit == 0 { String::new() } else { format!("LIMIT {limit}") };
        let text = match self {
            Question::Growth(by) => GROWTH.replace("{by}", by.name()).replace("{items}", &by.items()),
            Question::Diverge => DIVERGE.to_string(),
            Question::Suspects => SUSPECTS.to_string(),
        };
        let text = text.replace("{snapshots}", SNAPSHOTS).replace("{limit}", &limit);
        format!("{}\n", text.trim_end())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled() {
        let questions = By::ALL.into_iter().map(Question::Growth).chain([Question::Diverge, Question::Suspects]);
        for question in questions {
            for limit in [0, 7] {
                let sql = question.sql(limit);
                assert!(!sql.contains('{'), "{question:?}: {sql}");
                assert_eq!(sql.contains("LIMIT 7"), limit == 7);
                for table in question.tables() {
                    assert!(sql.contains(&format!("FROM {table}")), "{question:?} reads {table}");
                }
            }
        }
    }

    /// FLEET.md shows the queries as they run (with the default limit).
    #[test]
    fn the_documentation_shows_the_queries_that_run() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/FLEET.md")).unwrap();
        for question in [Question::Growth(By::Type), Question::Diverge, Question::Suspects] {
            assert!(
                doc.contains(&question.sql(20)),
                "fleet/FLEET.md does not show what `heapsnap fleet {} --sql` prints:\n{}",
                question.name(),
                question.sql(20)
            );
        }
    }
}
