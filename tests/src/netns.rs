//! Network namespaces for cluster fault tests: one namespace per node, joined by a bridge in
//! the root namespace, so a test can cut one node off from everyone ([`NetNs::isolate`]) and
//! join it again ([`NetNs::heal`]) while its process keeps running: a real network partition,
//! not a dead process. Needs root (`ip netns`, veth, bridges); CI runs as root.
//!
//! Layout: bridge `kb<pid><k>` in the root namespace holds `10.<a>.<b>.1/24`; node `i` lives in
//! namespace `kmt-<pid>-<k>-<i>` with `eth0` = `10.<a>.<b>.<10+i>/24` (the peer of veth
//! `kv<pid><k>n<i>`, enslaved to the bridge) and loopback up. Processes started through
//! [`NetNs::command`] bind their node's address; the test process, in the root namespace,
//! reaches every node through the bridge, and the nodes reach each other the same way.
//!
//! Isolation is `ip link set <veth> down` on the root side: the node's `eth0` loses carrier,
//! packets in flight are dropped both ways, established TCP connections hang (no RST), new
//! ones time out. That is what a cut cable or a partitioned switch port does, and it cuts the
//! node from the test process too (clients in the root namespace see it as unreachable).
//!
//! Invariants: names carry this process's pid, so parallel test processes never collide;
//! everything created is removed on drop, and leftovers of dead processes (a test killed by
//! SIGKILL) are removed when the next [`NetNs::create`] runs. Must not depend on kmirror's
//! crates; uses only the `ip` command.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A set of per-node namespaces on one bridge. Dropping it deletes them: stop the processes
/// running inside first (their handles must drop before this).
#[derive(Debug)]
pub struct NetNs {
    bridge: String,
    nodes: Vec<NsNode>,
    subnet: (u8, u8),
}

#[derive(Debug)]
struct NsNode {
    ns: String,
    veth: String,
    ip: String,
}

const NS_PREFIX: &str = "kmt-";
const BRIDGE_PREFIX: &str = "kb";
const VETH_PREFIX: &str = "kv";

/// Runs `ip ARGS`; panics with its stderr on failure.
fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run `ip {}`: {e} (install iproute2)", args.join(" ")));
    assert!(
        out.status.success(),
        "`ip {}` failed (network namespaces need root): {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `ip ARGS`, ignoring failure (cleanup of what may already be gone).
fn ip_quiet(args: &[&str]) {
    let _ = Command::new("ip").args(args).output();
}

fn ip_stdout(args: &[&str]) -> String {
    Command::new("ip")
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

fn pid_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Deletes namespaces and bridges left behind by test processes that no longer run.
fn remove_stale() {
    for line in ip_stdout(&["netns", "list"]).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(NS_PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !pid_alive(p)) {
            ip_quiet(&["netns", "del", name]);
        }
    }
    for line in ip_stdout(&["-o", "link", "show"]).lines() {
        // "7: kb1a2b3c0: <...>" or "8: kv1a2b3c0n1@if2: <...>"
        let Some(name) = line.split(": ").nth(1) else {
            continue;
        };
        let name = name.split('@').next().unwrap_or(name);
        let rest = name
            .strip_prefix(BRIDGE_PREFIX)
            .or_else(|| name.strip_prefix(VETH_PREFIX));
        let Some(rest) = rest else { continue };
        // <pid hex, 6 digits><k hex>[n<i>]
        let pid = rest.get(..6).and_then(|h| u32::from_str_radix(h, 16).ok());
        if pid.is_some_and(|p| !pid_alive(p)) {
            ip_quiet(&["link", "del", name]);
        }
    }
}

/// `10.a.b.0/24` subnets on any interface, to pick a free one.
fn used_subnets() -> Vec<(u8, u8)> {
    ip_stdout(&["-o", "-4", "addr", "show"])
        .split_whitespace()
        .filter_map(|w| {
            let addr = w.split('/').next()?;
            let o: Vec<u8> = addr
                .split('.')
                .map(|x| x.parse().ok())
                .collect::<Option<_>>()?;
            (o.len() == 4 && o[0] == 10).then(|| (o[1], o[2]))
        })
        .collect()
}

impl NetNs {
    /// Creates `n` namespaces (nodes 1..=n) on a fresh bridge. Panics if not root.
    pub fn create(n: usize) -> Self {
        assert!((1..=200).contains(&n));
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        remove_stale();
        let pid = std::process::id();
        assert!(
            pid < 1 << 24,
            "pid {pid} does not fit the 6 hex digits of a name"
        );
        let k = COUNTER.fetch_add(1, Ordering::Relaxed);
        assert!(k < 16, "more than 16 namespace sets in one test process");
        let tag = format!("{pid:06x}{k:x}");
        // A /24 no interface uses, derived from pid and k so parallel processes start apart.
        let used = used_subnets();
        let subnet = (0..250u32)
            .map(|j| {
                let x = (pid.wrapping_mul(31).wrapping_add(k * 7).wrapping_add(j)) % (250 * 64);
                ((200 + x / 250 % 50) as u8, (x % 250) as u8 + 1)
            })
            .find(|s| !used.contains(s))
            .expect("a free 10.x.y.0/24");
        let bridge = format!("{BRIDGE_PREFIX}{tag}");
        let mut me = NetNs {
            bridge: bridge.clone(),
            nodes: Vec::new(),
            subnet,
        };
        ip(&["link", "add", &bridge, "type", "bridge"]);
        ip(&[
            "addr",
            "add",
            &format!("10.{}.{}.1/24", subnet.0, subnet.1),
            "dev",
            &bridge,
        ]);
        ip(&["link", "set", &bridge, "up"]);
        for i in 1..=n {
            let ns = format!("{NS_PREFIX}{pid}-{k}-{i}");
            let veth = format!("{VETH_PREFIX}{tag}n{i}");
            let addr = format!("10.{}.{}.{}", subnet.0, subnet.1, 10 + i);
            ip(&["netns", "add", &ns]);
            me.nodes.push(NsNode {
                ns: ns.clone(),
                veth: veth.clone(),
                ip: addr.clone(),
            });
            ip(&[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ]);
            ip(&["link", "set", &veth, "master", &bridge]);
            ip(&["link", "set", &veth, "up"]);
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            // Java and others resolve and bind localhost at times: loopback must be up.
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        me
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    fn node(&self, id: usize) -> &NsNode {
        assert!(
            (1..=self.nodes.len()).contains(&id),
            "no namespace node {id}"
        );
        &self.nodes[id - 1]
    }

    /// Node `id`'s (1-based) address, reachable from the root namespace and the other nodes.
    pub fn ip_of(&self, id: usize) -> &str {
        &self.node(id).ip
    }

    /// The bridge's address: the root namespace as the nodes see it.
    pub fn host_ip(&self) -> String {
        format!("10.{}.{}.1", self.subnet.0, self.subnet.1)
    }

    /// The namespace name of node `id`.
    pub fn ns_of(&self, id: usize) -> &str {
        &self.node(id).ns
    }

    /// `ip netns exec <ns of id> <program>`: a command whose process (the same pid: `ip`
    /// execs it) runs inside node `id`'s namespace. Add arguments to the result.
    pub fn command(&self, id: usize, program: &std::ffi::OsStr) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.ns_of(id)]).arg(program);
        c
    }

    /// Cuts node `id` off from every other node and from the root namespace.
    pub fn isolate(&self, id: usize) {
        ip(&["link", "set", &self.node(id).veth, "down"]);
    }

    /// Joins node `id` again after [`NetNs::isolate`].
    pub fn heal(&self, id: usize) {
        ip(&["link", "set", &self.node(id).veth, "up"]);
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        for n in &self.nodes {
            // Deleting the namespace deletes its veth end, and so the pair.
            ip_quiet(&["netns", "del", &n.ns]);
            ip_quiet(&["link", "del", &n.veth]);
        }
        ip_quiet(&["link", "del", &self.bridge]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpStream};
    use std::time::Duration;

    fn reachable(addr: &str) -> bool {
        let a: SocketAddr = addr.parse().unwrap();
        TcpStream::connect_timeout(&a, Duration::from_millis(500)).is_ok()
    }

    /// A one-shot echo server inside a namespace: python3 binds the node's address.
    fn listen(net: &NetNs, id: usize, port: u16) -> crate::proc::ChildGuard {
        let script = format!(
            "import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
             s.bind(('{}',{port}))\ns.listen()\nwhile True:\n  c,_=s.accept()\n  c.sendall(b'hi')\n  c.close()\n",
            net.ip_of(id)
        );
        let child = net
            .command(id, "python3".as_ref())
            .args(["-c", &script])
            .spawn()
            .expect("python3 in a namespace");
        crate::proc::ChildGuard(child)
    }

    #[test]
    fn leftovers_of_a_dead_test_process_are_removed_on_create() {
        // A pid that ran a moment ago and has exited: what a SIGKILLed test leaves behind.
        let mut child = Command::new("true").spawn().expect("spawn true");
        let dead = child.id();
        child.wait().expect("wait");
        assert!(!pid_alive(dead));
        let ns = format!("{NS_PREFIX}{dead}-0-1");
        let bridge = format!("{BRIDGE_PREFIX}{dead:06x}0");
        ip(&["netns", "add", &ns]);
        ip(&["link", "add", &bridge, "type", "bridge"]);
        let net = NetNs::create(1);
        assert!(
            !ip_stdout(&["netns", "list"]).contains(&ns),
            "stale namespace {ns} survived"
        );
        assert!(
            !ip_stdout(&["-o", "link", "show"]).contains(&bridge),
            "stale bridge {bridge} survived"
        );
        // The live set is untouched.
        assert!(ip_stdout(&["netns", "list"]).contains(net.ns_of(1)));
    }

    #[test]
    fn isolate_cuts_one_node_and_heal_joins_it_again() {
        let net = NetNs::create(2);
        let _a = listen(&net, 1, 7000);
        let _b = listen(&net, 2, 7000);
        let a = format!("{}:7000", net.ip_of(1));
        let b = format!("{}:7000", net.ip_of(2));
        crate::proc::wait_for(Duration::from_secs(10), "listeners", || {
            (reachable(&a) && reachable(&b)).then_some(())
        });
        // Node 1 reaches node 2 from inside its namespace.
        let probe = |from: usize, to: &str| -> bool {
            let (h, p) = to.split_once(':').unwrap();
            let out = net
                .command(from, "python3".as_ref())
                .args([
                    "-c",
                    &format!(
                        "import socket\ns=socket.create_connection(('{h}',{p}),timeout=1)\nprint(s.recv(2).decode())"
                    ),
                ])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim() == "hi"
        };
        assert!(probe(1, &b), "node 1 cannot reach node 2");
        net.isolate(2);
        assert!(
            !reachable(&b),
            "the root namespace still reaches isolated node 2"
        );
        assert!(!probe(1, &b), "node 1 still reaches isolated node 2");
        assert!(reachable(&a), "node 1 was cut too");
        net.heal(2);
        crate::proc::wait_for(Duration::from_secs(10), "node 2 back", || {
            reachable(&b).then_some(())
        });
        assert!(probe(1, &b));
        let mut s = TcpStream::connect(&b).unwrap();
        let mut buf = [0u8; 2];
        s.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"hi");
        let _ = s.write(b"x");
        let names: Vec<String> = (1..=2).map(|i| net.ns_of(i).to_string()).collect();
        let bridge = net.bridge.clone();
        drop(_a);
        drop(_b);
        drop(net);
        let left = ip_stdout(&["netns", "list"]);
        for n in names {
            assert!(!left.contains(&n), "namespace {n} left behind");
        }
        assert!(
            !ip_stdout(&["-o", "link", "show"]).contains(&bridge),
            "bridge left behind"
        );
    }
}
