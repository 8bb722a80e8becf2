//! Scraping a kmirror node's Prometheus endpoint: a plain HTTP GET and a small parser of the
//! text exposition (OpenMetrics / Prometheus 0.0.4 sample lines), enough for tests to read
//! samples by name and labels.

use std::collections::BTreeMap;
use std::io::{Read, Write};

/// One sample line: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed scrape.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    pub samples: Vec<Sample>,
    /// Family names from `# TYPE` lines.
    pub families: Vec<String>,
    pub text: String,
}

impl Scrape {
    /// Samples named `name` whose labels include every pair of `labels`.
    pub fn find<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&str, &str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).is_some_and(|x| x == v))
        })
    }

    /// The single sample named `name` with `labels`; None when there is none, panics when
    /// several match.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let m: Vec<&Sample> = self.find(name, labels).collect();
        assert!(
            m.len() <= 1,
            "{name} {labels:?} matches {} samples",
            m.len()
        );
        m.first().map(|s| s.value)
    }

    /// Whether a sample or a family of that name is exposed.
    pub fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|s| s.name == name) || self.families.iter().any(|f| f == name)
    }
}

/// GET /metrics from `addr` and parse the body.
pub fn scrape(addr: &str) -> Scrape {
    let mut s = std::net::TcpStream::connect(addr)
        .unwrap_or_else(|e| panic!("metrics endpoint {addr}: {e}"));
    // One write: the endpoint answers after its first read and closes.
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .expect("send GET");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read metrics");
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .expect("HTTP response with a body");
    assert!(head.starts_with("HTTP/1.1 200"), "metrics answered {head}");
    parse(body)
}

/// Parse an exposition. Panics on a sample line it cannot read (a malformed exposition is
/// a test failure).
pub fn parse(text: &str) -> Scrape {
    let mut out = Scrape {
        text: text.to_owned(),
        ..Scrape::default()
    };
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some(name) = rest.split_whitespace().next() {
                out.families.push(name.to_owned());
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        out.samples
            .push(parse_sample(line).unwrap_or_else(|| panic!("bad sample line: {line}")));
    }
    out
}

fn parse_sample(line: &str) -> Option<Sample> {
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_owned();
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(r) = rest.strip_prefix('{') {
        let mut chars = r.char_indices();
        let mut key = String::new();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '}' => {
                    end = Some(i + 1);
                    break;
                }
                ',' | ' ' => {}
                '=' => {
                    let (_, q) = chars.next()?;
                    if q != '"' {
                        return None;
                    }
                    let mut val = String::new();
                    loop {
                        let (_, c) = chars.next()?;
                        match c {
                            '\\' => {
                                let (_, e) = chars.next()?;
                                val.push(if e == 'n' { '\n' } else { e });
                            }
                            '"' => break,
                            c => val.push(c),
                        }
                    }
                    labels.insert(std::mem::take(&mut key), val);
                }
                c => key.push(c),
            }
        }
        rest = &r[end?..];
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// Metric names (`kmirror_...`) used in the `expr` fields of a Grafana dashboard JSON.
pub fn dashboard_metric_names(dashboard: &serde_json::Value) -> Vec<String> {
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    if k == "expr" {
                        if let Some(e) = x.as_str() {
                            names_in(e, out);
                        }
                    }
                    walk(x, out);
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    fn names_in(expr: &str, out: &mut Vec<String>) {
        let b = expr.as_bytes();
        let mut i = 0;
        while let Some(at) = expr[i..].find("kmirror_") {
            let start = i + at;
            let boundary =
                start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
            let mut end = start;
            while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
                end += 1;
            }
            if boundary {
                out.push(expr[start..end].to_owned());
            }
            i = end;
        }
    }
    let mut out = Vec::new();
    walk(dashboard, &mut out);
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_openmetrics_samples_with_labels() {
        let s = parse(
            "# HELP x_total help\n# TYPE x counter\nx_total{mirror=\"a\",topic=\"t,1\"} 3\nup 1\n# EOF\n",
        );
        assert_eq!(
            s.value("x_total", &[("mirror", "a"), ("topic", "t,1")]),
            Some(3.0)
        );
        assert_eq!(s.value("up", &[]), Some(1.0));
        assert!(s.has("x"));
    }

    #[test]
    fn finds_metric_names_in_dashboard_exprs() {
        let d = serde_json::json!({"panels": [{"targets": [
            {"expr": "sum by (mirror) (rate(kmirror_mirror_partition_bytes_total[1m]))"},
            {"expr": "max(kmirror_mirror_partition_lag_ms{mirror=~\"$mirror\"})"}]}]});
        assert_eq!(
            dashboard_metric_names(&d),
            vec![
                "kmirror_mirror_partition_bytes_total",
                "kmirror_mirror_partition_lag_ms"
            ]
        );
    }
}
