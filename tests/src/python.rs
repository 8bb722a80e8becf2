//! Our librdkafka client programs (PyPI confluent-kafka) in `tests/python`.

use std::process::Command;

use crate::deps;

/// A `python3 tests/python/<script>` command; panics if confluent-kafka is missing.
pub fn script(script: &str) -> Command {
    let path = deps::workspace_root().join("tests/python").join(script);
    assert!(path.is_file(), "{} missing", path.display());
    let mut c = Command::new(deps::python());
    c.arg("-u").arg(path);
    c
}
