//! The Kubernetes example (`examples/kubernetes/`) against sprout itself: every manifest
//! parses and names its apiVersion, kind and name; the probes, the scrape configs and the
//! Services reach the port `sprout serve` listens on; the container and the image use only
//! flags and environment variables that `sprout serve --help` lists, with the keys from a
//! Secret; and a running server answers every path that the manifests and the README's
//! fan-out snippet use.
//!
//! The server runs the model on the GPU: with no adapter it cannot start, and the last
//! test fails.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use yaml_rust2::{Yaml, YamlLoader};

#[path = "common/server.rs"]
mod server;
use server::Server;

fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/kubernetes")
}

/// One YAML document of the example, with its file's name for messages.
struct Manifest {
    file: String,
    doc: Yaml,
}

impl Manifest {
    fn kind(&self) -> &str {
        self.doc["kind"].as_str().unwrap_or("")
    }

    fn name(&self) -> &str {
        self.doc["metadata"]["name"].as_str().unwrap_or("")
    }
}

/// Every document of every `.yaml` or `.yml` file in the example.
fn manifests() -> Vec<Manifest> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(example_dir())
        .expect("examples/kubernetes/")
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let docs = YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(!docs.is_empty(), "{file} holds no document");
        out.extend(docs.into_iter().map(|doc| Manifest {
            file: file.clone(),
            doc,
        }));
    }
    out
}

/// The one manifest of `kind`.
fn only<'a>(all: &'a [Manifest], kind: &str) -> &'a Manifest {
    let found: Vec<&Manifest> = all.iter().filter(|m| m.kind() == kind).collect();
    assert_eq!(found.len(), 1, "the example has one {kind}");
    found[0]
}

fn services(all: &[Manifest]) -> Vec<&Manifest> {
    all.iter().filter(|m| m.kind() == "Service").collect()
}

/// The Deployment's one container.
fn container(all: &[Manifest]) -> &Yaml {
    let containers = only(all, "Deployment").doc["spec"]["template"]["spec"]["containers"]
        .as_vec()
        .expect("the Deployment lists its containers");
    assert_eq!(containers.len(), 1, "the Deployment runs one container");
    &containers[0]
}

fn strings(list: &Yaml) -> Vec<&str> {
    let list = list.as_vec().map(Vec::as_slice).unwrap_or_default();
    list.iter()
        .map(|v| {
            v.as_str()
                .unwrap_or_else(|| panic!("{v:?} is not a string"))
        })
        .collect()
}

/// The value after `flag` in `args` (`--flag value` or `--flag=value`).
fn flag_value<'a>(args: &[&'a str], flag: &str) -> Option<&'a str> {
    let prefix = format!("{flag}=");
    args.iter().enumerate().find_map(|(i, arg)| match *arg {
        a if a == flag => args.get(i + 1).copied(),
        a => a.strip_prefix(prefix.as_str()),
    })
}

/// The port `sprout serve` listens on in the container: its `--port`.
fn listen_port(all: &[Manifest]) -> i64 {
    let args = strings(&container(all)["args"]);
    let port = flag_value(&args, "--port").expect("the container's args give --port");
    port.parse().expect("--port is a number")
}

/// The container port that `port` names: a number, or the name of one of its ports.
fn container_port(container: &Yaml, port: &Yaml) -> i64 {
    if let Some(number) = port.as_i64() {
        return number;
    }
    let name = port.as_str().unwrap_or_else(|| panic!("port {port:?}"));
    let ports = container["ports"]
        .as_vec()
        .map(Vec::as_slice)
        .unwrap_or_default();
    ports
        .iter()
        .find(|p| p["name"].as_str() == Some(name))
        .and_then(|p| p["containerPort"].as_i64())
        .unwrap_or_else(|| panic!("the container has no port named {name:?}"))
}

/// Whether every key of `selector` has the same value in `labels`.
fn selects(selector: &Yaml, labels: &Yaml) -> bool {
    let selector = selector.as_hash().expect("a selector is a map");
    !selector.is_empty()
        && selector
            .iter()
            .all(|(k, v)| &labels[k.as_str().unwrap()] == v)
}

/// The Deployment's probes: (which, the path it GETs, the container port it reaches).
fn probes(all: &[Manifest]) -> Vec<(&'static str, String, i64)> {
    let container = container(all);
    let mut out = Vec::new();
    for which in ["startupProbe", "readinessProbe", "livenessProbe"] {
        let get = &container[which]["httpGet"];
        if get.is_badvalue() {
            continue;
        }
        let path = get["path"]
            .as_str()
            .unwrap_or_else(|| panic!("{which} has no path"));
        out.push((
            which,
            path.to_string(),
            container_port(container, &get["port"]),
        ));
    }
    out
}

/// The paths Prometheus scrapes: the pods' `prometheus.io/path` and each ServiceMonitor
/// endpoint's.
fn scrape_paths(all: &[Manifest]) -> Vec<String> {
    let annotations = &only(all, "Deployment").doc["spec"]["template"]["metadata"]["annotations"];
    let mut paths = vec![
        annotations["prometheus.io/path"]
            .as_str()
            .unwrap()
            .to_string(),
    ];
    let endpoints = &only(all, "ServiceMonitor").doc["spec"]["endpoints"];
    for endpoint in endpoints
        .as_vec()
        .expect("the ServiceMonitor lists endpoints")
    {
        paths.push(endpoint["path"].as_str().unwrap().to_string());
    }
    paths
}

/// The paths the README's fan-out snippet POSTs to: the string after each `post(ip, "`
/// in its Python block.
fn snippet_post_paths() -> Vec<String> {
    let readme = std::fs::read_to_string(example_dir().join("README.md")).unwrap();
    let python = readme
        .split("```python\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the README has a Python block");
    python
        .split("post(ip, \"")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().to_string())
        .collect()
}

fn serve_help() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sprout"))
        .args(["serve", "--help"])
        .output()
        .expect("running sprout serve --help");
    assert!(out.status.success(), "sprout serve --help failed");
    String::from_utf8(out.stdout).unwrap()
}

/// The flags `sprout serve --help` lists (the first `--name` of each option's line).
fn listed_flags(help: &str) -> BTreeSet<String> {
    help.lines()
        .filter(|line| line.trim_start().starts_with('-'))
        .filter_map(|line| line.split_whitespace().find(|w| w.starts_with("--")))
        .map(|flag| flag.trim_end_matches(',').to_string())
        .collect()
}

/// The environment variables `sprout serve --help` lists (`[env: NAME=]`).
fn listed_env(help: &str) -> BTreeSet<String> {
    help.split("[env: ")
        .skip(1)
        .map(|rest| rest.split('=').next().unwrap().to_string())
        .collect()
}

#[test]
fn every_manifest_names_its_api_version_kind_and_name() {
    let all = manifests();
    for m in &all {
        for (field, value) in [
            ("apiVersion", m.doc["apiVersion"].as_str()),
            ("kind", m.doc["kind"].as_str()),
            ("metadata.name", m.doc["metadata"]["name"].as_str()),
        ] {
            assert!(
                value.is_some_and(|v| !v.is_empty()),
                "a document of {} has no {field}",
                m.file
            );
        }
    }
    let kinds: BTreeSet<&str> = all.iter().map(Manifest::kind).collect();
    for kind in [
        "Deployment",
        "Service",
        "ServiceMonitor",
        "PersistentVolumeClaim",
    ] {
        assert!(kinds.contains(kind), "the example has no {kind}");
    }
}

#[test]
fn probes_and_scrapes_reach_the_port_the_services_target() {
    let all = manifests();
    let container = container(&all);
    let port = listen_port(&all);
    let args = strings(&container["args"]);
    // Probes and other pods reach the container only if it listens on every address.
    assert_eq!(flag_value(&args, "--host"), Some("0.0.0.0"));

    let probes = probes(&all);
    let kinds: Vec<&str> = probes.iter().map(|p| p.0).collect();
    assert!(kinds.contains(&"readinessProbe") && kinds.contains(&"livenessProbe"));
    for (which, path, probe_port) in &probes {
        assert!(path.starts_with('/'), "{which} GETs {path:?}");
        assert_eq!(
            *probe_port, port,
            "{which} reaches another port than --port"
        );
    }

    let pod = &only(&all, "Deployment").doc["spec"]["template"]["metadata"];
    let annotations = &pod["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"].as_str(), Some("true"));
    assert_eq!(
        annotations["prometheus.io/port"].as_str(),
        Some(port.to_string().as_str())
    );
    for path in scrape_paths(&all) {
        assert!(path.starts_with('/'), "a scrape of {path:?}");
    }

    // Both Services pick the Deployment's pods and reach --port; one is headless.
    let services = services(&all);
    for service in &services {
        let spec = &service.doc["spec"];
        assert!(
            selects(&spec["selector"], &pod["labels"]),
            "Service {} does not select the Deployment's pods",
            service.name()
        );
        for p in spec["ports"].as_vec().expect("a Service lists its ports") {
            let target = match &p["targetPort"] {
                Yaml::BadValue => &p["port"],
                target => target,
            };
            assert_eq!(
                container_port(container, target),
                port,
                "{}",
                service.name()
            );
        }
    }
    let headless = services
        .iter()
        .filter(|s| s.doc["spec"]["clusterIP"].as_str() == Some("None"))
        .count();
    assert_eq!(headless, 1, "one headless Service, for the fan-out");

    // The ServiceMonitor scrapes through one Service (through both it would scrape each
    // pod twice), by the name of a port of that Service that reaches --port.
    let monitor = &only(&all, "ServiceMonitor").doc["spec"];
    let selected: Vec<&&Manifest> = services
        .iter()
        .filter(|s| {
            selects(
                &monitor["selector"]["matchLabels"],
                &s.doc["metadata"]["labels"],
            )
        })
        .collect();
    assert_eq!(selected.len(), 1, "the ServiceMonitor selects one Service");
    let ports = selected[0].doc["spec"]["ports"].as_vec().unwrap();
    for endpoint in monitor["endpoints"].as_vec().unwrap() {
        let name = endpoint["port"]
            .as_str()
            .expect("an endpoint names its port");
        let p = ports
            .iter()
            .find(|p| p["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("the Service has no port named {name:?}"));
        assert_eq!(container_port(container, &p["targetPort"]), port);
    }
}

#[test]
fn the_container_and_the_image_use_only_what_sprout_serve_has() {
    let all = manifests();
    let help = serve_help();
    let (flags, env) = (listed_flags(&help), listed_env(&help));
    assert!(flags.contains("--admin-api-key") && env.contains("SPROUT_ADMIN_API_KEY"));

    // The Deployment's args follow the image's entrypoint, `sprout`; so does its CMD.
    let dockerfile = std::fs::read_to_string(example_dir().join("Dockerfile")).unwrap();
    let directive = |name: &str| -> Vec<String> {
        let line = dockerfile
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("the Dockerfile has no {name}"));
        serde_json::from_str(line.trim()).expect("an exec-form (JSON) list")
    };
    assert_eq!(directive("ENTRYPOINT "), ["sprout"]);
    let container = container(&all);
    assert!(
        container["command"].is_badvalue(),
        "the image's entrypoint runs"
    );
    let image_cmd = directive("CMD ");
    let container_args: Vec<String> = strings(&container["args"])
        .into_iter()
        .map(String::from)
        .collect();
    for args in [image_cmd, container_args] {
        assert_eq!(args.first().map(String::as_str), Some("serve"), "{args:?}");
        for arg in args.iter().filter(|a| a.starts_with("--")) {
            let flag = arg.split('=').next().unwrap();
            assert!(flags.contains(flag), "sprout serve has no {flag}");
        }
    }

    // sprout's own variables are ones it reads; the keys come from a Secret.
    let vars = container["env"].as_vec().expect("the container sets env");
    let from_secret = |name: &str| {
        vars.iter()
            .find(|v| v["name"].as_str() == Some(name))
            .is_some_and(|v| !v["valueFrom"]["secretKeyRef"]["name"].is_badvalue())
    };
    for var in vars {
        let name = var["name"].as_str().unwrap();
        if name.starts_with("SPROUT_") {
            assert!(env.contains(name), "sprout serve reads no {name}");
        }
    }
    assert!(from_secret("SPROUT_ADMIN_API_KEY") && from_secret("SPROUT_API_KEY"));
}

const ADMIN_KEY: &str = "the-admin-key";

impl Server {
    /// `sprout serve` on the tiny model, its admin key set as the Deployment sets it
    /// (SPROUT_ADMIN_API_KEY).
    fn start() -> Server {
        let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama");
        let mut command = Command::new(env!("CARGO_BIN_EXE_sprout"));
        command
            .args(["serve", "--model", model.to_str().unwrap(), "--port", "0"])
            .env("SPROUT_ADMIN_API_KEY", ADMIN_KEY);
        Server::spawn(command)
    }

    /// (status, body) of one request that closes its connection.
    fn http(&self, method: &str, path: &str, headers: &[&str], body: &str) -> (u16, String) {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(300)))
            .unwrap();
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        );
        for h in headers {
            head.push_str(&format!("{h}\r\n"));
        }
        stream
            .write_all(format!("{head}\r\n{body}").as_bytes())
            .unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).unwrap();
        let status = raw.split(' ').nth(1).and_then(|s| s.parse().ok());
        let body = raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
        (status.expect("a status line"), body.unwrap_or_default())
    }
}

#[test]
fn a_server_answers_every_path_the_manifests_and_the_fan_out_use() {
    let all = manifests();
    let server = Server::start();
    for (which, path, _) in probes(&all) {
        let (status, body) = server.http("GET", &path, &[], "");
        assert_eq!(status, 200, "{which}: GET {path}: {body}");
    }
    for path in scrape_paths(&all) {
        let (status, body) = server.http("GET", &path, &[], "");
        assert_eq!(status, 200, "GET {path}: {body}");
        assert!(
            body.lines().any(|l| l.starts_with("vllm:")),
            "GET {path} has no vllm: metric:\n{body}"
        );
    }

    let auth = format!("Authorization: Bearer {ADMIN_KEY}");
    let paths = snippet_post_paths();
    assert!(paths.iter().any(|p| p == "/update_weights"), "{paths:?}");
    for path in &paths {
        let (status, body) = server.http("POST", path, &[&auth], "{}");
        assert!(
            status != 404 && status != 405,
            "POST {path}: {status} {body}"
        );
    }
    // An update with no checkpoint is refused for what it lacks, not for its route; and
    // without the admin key it is refused before that.
    let (status, body) = server.http("POST", "/update_weights", &[&auth], "{}");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("weight_dir"), "{body}");
    let (status, body) = server.http("POST", "/update_weights", &[], "{}");
    assert_eq!(status, 401, "{body}");
}
