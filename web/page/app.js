// The demo page: loads a GGUF model into sprout's engine (wasm32, WebGPU), runs G samples
// of a prompt, raw or as a chat message through the model's own template, and draws them
// as they grow, with the KV block pool beside them.
//
// The engine runs in a Web Worker (worker.js), so the page stays responsive while it
// loads and generates; this file only moves bytes to the worker and draws what each step
// reports. Stop asks the worker to abort the rollout, whose last report shows its blocks
// freed. `window.sproutDemo` exposes the state, the last step report and the last result
// so that web/test.sh can check them.

const $ = (id) => document.getElementById(id);
const demo = {
  state: "starting", adapter: null, model: null, lastStep: null, lastResult: null, lastError: null,
};
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

// The engine's worker, and the one request it is answering (stop aside).
let worker = null;
let pending = null;
let stepHandler = null;
const replies = { open: "opened", load: "loaded", rollout: "result" };

function call(type, data = {}, transfer = []) {
  return new Promise((resolve, reject) => {
    pending = { type, resolve, reject };
    worker.postMessage({ type, ...data }, transfer);
  });
}

function onWorkerMessage(event) {
  const m = event.data;
  if (m.type === "step") {
    if (stepHandler) stepHandler(m.report);
    return;
  }
  const p = pending;
  if (!p) return;
  pending = null;
  if (m.type === "error") {
    const err = new Error(m.message);
    err.kept = m.kept;
    p.reject(err);
  } else if (m.type === replies[p.type]) {
    p.resolve(m);
  } else {
    p.reject(new Error(`the engine answered ${m.type} to ${p.type}`));
  }
}

function onWorkerError(event) {
  event.preventDefault();
  const err = new Error(`the engine's worker failed: ${event.message || "it could not start"}`);
  if (pending) {
    const p = pending;
    pending = null;
    p.reject(err);
  } else {
    fail("run-status", err);
  }
}

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
  worker = new Worker(new URL("./worker.js", import.meta.url), { type: "module" });
  worker.onmessage = onWorkerMessage;
  worker.onerror = onWorkerError;
  try {
    demo.adapter = (await call("open")).adapter;
  } catch (err) {
    $("no-webgpu").hidden = false;
    $("no-webgpu").textContent = String(err.message || err);
    $("adapter").textContent = "no adapter";
    setState("no-webgpu");
    return;
  }
  const a = demo.adapter;
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
  // The bytes move to the worker (transferred, not copied); the page stays live meanwhile.
  for (const id of ["run", "load-url", "model-file"]) $(id).disabled = true;
  try {
    demo.model = JSON.parse((await call("load", { name, bytes: bytes.buffer }, [bytes.buffer])).model);
  } catch (err) {
    // A file that is not a model sprout runs leaves the old model loaded.
    const kept = err.kept;
    if (!kept) demo.model = null;
    $("run").disabled = !kept;
    fail("model-status", err);
    if (kept) $("model-status").textContent += ` (${kept} is still loaded)`;
    return;
  } finally {
    $("load-url").disabled = false;
    $("model-file").disabled = false;
  }
  const m = demo.model;
  $("model-status").textContent =
    `${m.name}: ${m.architecture}, ${m.n_layers} layers, ${m.weight_format}, ` +
    `${(m.bytes / 2 ** 20).toFixed(0)} MiB, loaded in ${m.load_s.toFixed(1)} s` +
    (m.chat_template ? ", with a chat template" : ", no chat template");
  // Chat mode is on by default for a model that has a template, and off without one.
  $("chat").disabled = !m.chat_template;
  $("chat").checked = m.chat_template;
  showMode();
  $("run").disabled = false;
  setState("loaded");
}

// The prompt field's label says whether it is sent as it is or as a chat message.
function showMode() {
  $("prompt-label").textContent = $("chat").checked
    ? "Message (rendered with the model's chat template)"
    : "Prompt (sent as it is)";
}

function options() {
  return {
    prompt: $("prompt").value,
    chat: $("chat").checked,
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
    // A chat's prompt is the template's text around the message; the card shows the message.
    card.querySelector(".prompt").textContent = $("chat").checked ? "" : $("prompt").value;
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
  demo.lastStep = r;
  r.texts.forEach((text, k) => {
    $(`text-${k}`).textContent = text;
    const state = r.stopped ? "stopped" : r.finished[k] ? "done" : "generating";
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
  // One rollout at a time, and no model swap under it; Stop while it runs.
  for (const id of ["run", "load-url", "model-file", "chat"]) $(id).disabled = true;
  $("stop").disabled = false;
  $("run-status").classList.remove("error");
  $("run-status").textContent = "generating…";
  // This rollout's reports only: nothing of the one before may read as its own.
  demo.lastStep = null;
  $("stat-steps").textContent = "0";
  stepHandler = (json) => onStep(json, opts.n);
  try {
    const result = JSON.parse((await call("rollout", { options: opts })).result);
    demo.lastResult = result;
    $("stat-tps").textContent = result.tokens_per_s.toFixed(1);
    $("stat-prefill").textContent = result.prefill_tokens_computed;
    const what = result.stopped
      ? `stopped after ${result.generated_tokens} tokens; its KV blocks are free (${result.blocks_in_use} in use)`
      : `${result.generated_tokens} tokens`;
    $("run-status").textContent =
      `${what} in ${result.wall_s.toFixed(1)} s and ${result.steps} steps ` +
      `(${result.tokens_per_s.toFixed(1)} tokens/s); peak ${result.peak_kv_blocks} of ${result.num_blocks} KV blocks`;
    setState(result.stopped ? "stopped" : "done");
  } catch (err) {
    fail("run-status", err);
  } finally {
    stepHandler = null;
    $("stop").disabled = true;
    $("run").disabled = !demo.model;
    $("chat").disabled = !(demo.model && demo.model.chat_template);
    $("load-url").disabled = false;
    $("model-file").disabled = false;
  }
}

function stop() {
  if (demo.state !== "running") return;
  $("stop").disabled = true;
  $("run-status").textContent = "stopping…";
  worker.postMessage({ type: "stop" });
}

$("load-url").addEventListener("click", loadFromUrl);
$("model-file").addEventListener("change", (e) => e.target.files[0] && loadFile(e.target.files[0]));
$("run-form").addEventListener("submit", run);
$("stop").addEventListener("click", stop);
$("chat").addEventListener("change", showMode);
start().catch((err) => fail("run-status", err));
