// The demo page: loads a GGUF model into sprout's engine (wasm32, WebGPU), runs G samples
// of a prompt and draws them as they grow, with the KV block pool beside them.
//
// Every token comes from the engine (pkg/sprout_web.js); this file only moves bytes in
// and draws what each step reports. `window.sproutDemo` exposes the state and the last
// result so that web/test.sh can check them.

import init, { Session } from "./pkg/sprout_web.js";

const $ = (id) => document.getElementById(id);
const demo = { state: "starting", adapter: null, model: null, lastResult: null, lastError: null };
window.sproutDemo = demo;

function setState(state) {
  demo.state = state;
  document.body.dataset.state = state;
}

function fail(where, err) {
  const message = String(err && err.message ? err.message : err);
  demo.lastError = message;
  $(where).textContent = message;
  $(where).classList.add("error");
  setState("error");
}

let session = null;

async function start() {
  if (!("gpu" in navigator)) {
    const banner = $("no-webgpu");
    banner.hidden = false;
    banner.innerHTML =
      "<strong>This browser has no WebGPU.</strong> sprout runs its kernels on your GPU " +
      "through WebGPU: open this page in Chrome or Edge 113 or newer, Safari 26, or " +
      "Firefox 141 on Windows. On Linux, Chromium may need <code>--enable-unsafe-webgpu" +
      "</code> (and <code>--enable-features=Vulkan</code>).";
    $("adapter").textContent = "no WebGPU";
    setState("no-webgpu");
    return;
  }
  await init();
  try {
    session = await Session.open();
  } catch (err) {
    $("no-webgpu").hidden = false;
    $("no-webgpu").textContent = String(err.message || err);
    $("adapter").textContent = "no adapter";
    setState("no-webgpu");
    return;
  }
  demo.adapter = JSON.parse(session.adapter());
  const a = demo.adapter;
  if (!a.name) {
    // Browsers leave wgpu's adapter name empty; WebGPU's own adapter info names it.
    const info = (await navigator.gpu.requestAdapter())?.info;
    if (info) a.name = info.description || [info.vendor, info.architecture].filter(Boolean).join(" ");
  }
  const features = [a.shader_f16 ? "f16" : "no f16", a.subgroups ? "subgroups" : "no subgroups"];
  $("adapter").textContent = `${a.backend} · ${a.name || "unnamed adapter"} · ${a.device_type} · ${features.join(", ")}`;
  setState("ready");
}

// Fetches `url` with a progress bar, then loads it.
async function loadFromUrl() {
  const url = $("model-url").value.trim();
  if (!url) return fail("model-status", "give a URL to a .gguf file");
  setState("loading");
  $("model-status").classList.remove("error");
  $("model-status").textContent = `downloading ${url}…`;
  let response;
  try {
    response = await fetch(url);
  } catch (err) {
    return fail("model-status", `${url}: ${err.message}`);
  }
  if (!response.ok) return fail("model-status", `${url}: HTTP ${response.status} ${response.statusText}`);
  const total = Number(response.headers.get("content-length")) || 0;
  const reader = response.body.getReader();
  const bytes = total ? new Uint8Array(total) : null;
  const chunks = [];
  let received = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (bytes && received + value.length <= total) bytes.set(value, received);
    else chunks.push(value);
    received += value.length;
    if (total) $("load-bar").style.width = `${(100 * received) / total}%`;
    $("model-status").textContent = `downloading: ${(received / 2 ** 20).toFixed(1)} MiB`;
  }
  const all = bytes && received === total ? bytes : concat(chunks, received);
  const name = url.split("/").pop();
  await loadBytes(name, all);
}

function concat(chunks, size) {
  const out = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

async function loadFile(file) {
  setState("loading");
  $("model-status").classList.remove("error");
  $("model-status").textContent = `reading ${file.name}…`;
  const bytes = new Uint8Array(await file.arrayBuffer());
  await loadBytes(file.name, bytes);
}

async function loadBytes(name, bytes) {
  $("model-status").textContent = `uploading ${name} to the GPU…`;
  $("load-bar").style.width = "100%";
  // Let the status paint before the (synchronous) upload.
  await new Promise((r) => setTimeout(r, 30));
  try {
    demo.model = JSON.parse(session.load_model(name, bytes));
  } catch (err) {
    // A file that is not a model sprout runs leaves the old model loaded.
    const kept = session.model_name();
    if (!kept) demo.model = null;
    $("run").disabled = !kept;
    fail("model-status", err);
    if (kept) $("model-status").textContent += ` (${kept} is still loaded)`;
    return;
  }
  const m = demo.model;
  $("model-status").textContent =
    `${m.name}: ${m.architecture}, ${m.n_layers} layers, ${m.weight_format}, ` +
    `${(m.bytes / 2 ** 20).toFixed(0)} MiB, loaded in ${m.load_s.toFixed(1)} s`;
  $("run").disabled = false;
  setState("loaded");
}

function options() {
  return {
    prompt: $("prompt").value,
    n: Number($("n").value),
    max_tokens: Number($("max-tokens").value),
    temperature: Number($("temperature").value),
    top_p: Number($("top-p").value),
    seed: Number($("seed").value),
    kv_mib: Number($("kv-mib").value),
    kernels: $("kernels").value,
  };
}

// Sample colours run from blue through purple to red, clear of the shared blocks' green.
const hue = (k, n) => Math.round(190 + (220 * k) / Math.max(n, 1)) % 360;

function buildColumns(n) {
  const box = $("samples");
  box.innerHTML = "";
  box.style.setProperty("--columns", Math.min(n, 4));
  for (let k = 0; k < n; k++) {
    const card = document.createElement("article");
    card.className = "sample";
    card.style.setProperty("--hue", hue(k, n));
    card.innerHTML =
      `<header><span class="dot"></span>sample ${k}<span class="meta" id="meta-${k}">0 tokens</span></header>` +
      `<div class="text"><span class="prompt"></span><span class="gen" id="text-${k}"></span><span class="cursor"></span></div>`;
    card.querySelector(".prompt").textContent = $("prompt").value;
    box.appendChild(card);
  }
}

function drawPool(pool, n) {
  const box = $("pool");
  while (box.children.length < pool.length) box.appendChild(document.createElement("i"));
  while (box.children.length > pool.length) box.lastChild.remove();
  let used = 0;
  pool.forEach((b, i) => {
    const cell = box.children[i];
    cell.className = b.use;
    if (b.use === "private") {
      const k = b.sample ?? -1;
      cell.style.background = k >= 0 ? `hsl(${hue(k, n)} 70% 55%)` : "";
      cell.title = k >= 0 ? `block ${i}: sample ${k}` : `block ${i}: the prompt, before the fork`;
    } else {
      cell.style.background = "";
      cell.title = b.use === "shared" ? `block ${i}: shared by ${b.tables} sequences` : `block ${i}: ${b.use}`;
    }
    if (b.use === "shared" || b.use === "private") used++;
  });
  $("stat-blocks").textContent = `${used} / ${pool.length}`;
}

function onStep(json, n) {
  const r = JSON.parse(json);
  r.texts.forEach((text, k) => {
    $(`text-${k}`).textContent = text;
    const state = r.finished[k] ? "done" : "generating";
    $(`meta-${k}`).textContent = `${r.lengths[k]} tokens · ${state}`;
    $(`text-${k}`).closest(".sample").classList.toggle("finished", r.finished[k]);
  });
  $("stat-tps").textContent = r.tokens_per_s.toFixed(1);
  $("stat-generated").textContent = r.generated_tokens;
  $("stat-steps").textContent = r.step;
  drawPool(r.pool, n);
}

async function run(event) {
  event.preventDefault();
  if (!demo.model) return;
  const opts = options();
  buildColumns(opts.n);
  setState("running");
  // One rollout at a time, and no model swap under it.
  for (const id of ["run", "load-url", "model-file"]) $(id).disabled = true;
  $("run-status").classList.remove("error");
  $("run-status").textContent = "generating…";
  try {
    const result = JSON.parse(await session.rollout(JSON.stringify(opts), (json) => onStep(json, opts.n)));
    demo.lastResult = result;
    $("stat-tps").textContent = result.tokens_per_s.toFixed(1);
    $("stat-prefill").textContent = result.prefill_tokens_computed;
    $("run-status").textContent =
      `${result.generated_tokens} tokens in ${result.wall_s.toFixed(1)} s and ${result.steps} steps ` +
      `(${result.tokens_per_s.toFixed(1)} tokens/s); peak ${result.peak_kv_blocks} of ${result.num_blocks} KV blocks`;
    setState("done");
  } catch (err) {
    fail("run-status", err);
  } finally {
    $("run").disabled = !demo.model;
    $("load-url").disabled = false;
    $("model-file").disabled = false;
  }
}

$("load-url").addEventListener("click", loadFromUrl);
$("model-file").addEventListener("change", (e) => e.target.files[0] && loadFile(e.target.files[0]));
$("run-form").addEventListener("submit", run);
start().catch((err) => fail("run-status", err));
