// The browser test of the demo page (run by web/test.sh, which builds and serves it).
//
// For each case it runs the same rollout twice: natively (`sprout rollout` on this
// machine's adapter) and in headless Chromium through the page, driven like a user (fill
// the fields, press Generate). Every sample's tokens must be equal. The chat case sends
// its prompt as a chat message, which the page renders with the model's template in the
// engine; natively it is a prompts file's `{"messages": [...]}` line. Then it saves a
// screenshot and prints tokens/s of both, stops a long rollout with Stop (the page must
// stay responsive while it runs, the engine being in a Web Worker, and every KV block must
// be free after), and checks what the page says in a browser without WebGPU.
//
// Then it loads a second, small file in a K-quant mix (KQUANT_URL, KQUANT_PATH: the tiny
// Qwen3 in Q4_K_M's Q4_K and Q6_K, tests/fixtures) and runs the "k-quant" case on it, and
// Gemma 3 270M Q4_K_M (GEMMA_URL, GEMMA_PATH: sliding windows, a SentencePiece vocabulary
// and an embedding of 262,144 rows) for the "gemma3" case.
//
// Environment: SPROUT_BIN (the native binary), BASE_URL (where the page is served),
// MODEL_URL (the model, relative to BASE_URL), MODEL_PATH (the same file on disk),
// KQUANT_URL and KQUANT_PATH, GEMMA_URL and GEMMA_PATH (the other models, the same way),
// OUT_DIR (results and the screenshot).

import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { chromium } from "playwright-core";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`web/test.mjs: ${name} is not set (run web/test.sh)`);
  return v;
};
const [bin, baseUrl, modelUrl, modelPath, kquantUrl, kquantPath, gemmaUrl, gemmaPath, outDir] =
  ["SPROUT_BIN", "BASE_URL", "MODEL_URL", "MODEL_PATH", "KQUANT_URL", "KQUANT_PATH", "GEMMA_URL",
    "GEMMA_PATH", "OUT_DIR"].map(env);
// Each case's model: the default one unless it names another.
const models = {
  default: { url: modelUrl, path: modelPath },
  kquant: { url: kquantUrl, path: kquantPath },
  gemma3: { url: gemmaUrl, path: gemmaPath },
};
mkdirSync(outDir, { recursive: true });

// Long enough (over two 16-token KV blocks) that the group shares whole blocks.
const prompt =
  "The Eiffel Tower was built for the 1889 World's Fair in Paris. Its designer, Gustave " +
  "Eiffel, was already known for bridges and for the inner frame of the Statue of Liberty. " +
  "Today the tower";
const cases = [
  { name: "greedy", n: 4, max_tokens: 16, temperature: 0, top_p: 1, seed: 1 },
  { name: "sampled", n: 4, max_tokens: 24, temperature: 0.8, top_p: 0.95, seed: 7, screenshot: true },
  // The GPU-shaped kernels (matrix-vector and GEMM shapes, attention split across pages)
  // forced on the browser's adapter: the same tokens as native's CPU-shaped ones.
  { name: "gpu-kernels", n: 2, max_tokens: 6, temperature: 0.8, top_p: 0.95, seed: 3, kernels: "gpu" },
  // The prompt as a user message through SmolLM2-Instruct's own chat template.
  { name: "chat", chat: "Write a haiku about the sea.", n: 2, max_tokens: 24, temperature: 0.7, top_p: 0.95, seed: 5 },
  // The second model: Q4_K and Q6_K decoded in the browser's kernels, its own (Qwen3) template.
  { name: "k-quant", model: "kquant", chat: "Name a colour.", n: 2, max_tokens: 8, temperature: 0.8, top_p: 0.95, seed: 2 },
  // Gemma 3 (a base model: a text prompt), greedy then sampled, in the browser's kernels.
  { name: "gemma3", model: "gemma3", text: "The capital of France is", n: 2, max_tokens: 8, temperature: 0, top_p: 1, seed: 1 },
  { name: "gemma3-sampled", model: "gemma3", text: "Once upon a time", n: 2, max_tokens: 6, temperature: 0.9, top_p: 0.95, seed: 4 },
];
const CASE_TIMEOUT_MS = 10 * 60 * 1000;
// WEB_TEST_CASES=chat,stop runs only the cases named (for a quick rerun); all by default.
const only = process.env.WEB_TEST_CASES ? process.env.WEB_TEST_CASES.split(",") : null;
const wanted = (name) => !only || only.includes(name);

// Loads the model at `url` (relative to BASE_URL) through the page's URL field.
// A model already loaded keeps the state "loaded" until the click starts the new load, so
// this waits for the new one by name (or an error).
async function loadModel(page, url) {
  const name = url.split("/").pop();
  await page.fill("#model-url", url);
  await page.click("#load-url");
  await page.waitForFunction((name) => {
    const d = window.sproutDemo;
    return d.state === "error" || (d.state === "loaded" && d.model && d.model.name === name);
  }, name, { timeout: CASE_TIMEOUT_MS });
  if ((await page.evaluate(() => window.sproutDemo.state)) !== "loaded") {
    throw new Error(`loading ${url} failed: ${await page.textContent("#model-status")}`);
  }
  console.log(`model: ${await page.textContent("#model-status")}`);
}

function native(c) {
  const out = `${outDir}/native-${c.name}.jsonl`;
  let input = ["--prompt", c.text ?? prompt];
  if (c.chat) {
    const file = `${outDir}/native-${c.name}-prompts.jsonl`;
    writeFileSync(file, JSON.stringify({ messages: [{ role: "user", content: c.chat }] }) + "\n");
    input = ["--prompts", file];
  }
  const summary = execFileSync(bin, [
    "rollout", "--model", models[c.model || "default"].path, ...input, "-n", String(c.n),
    "--max-tokens", String(c.max_tokens), "--temperature", String(c.temperature),
    "--top-p", String(c.top_p), "--seed", String(c.seed), "--out", out, "--json",
  ], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  const samples = readFileSync(out, "utf8").trim().split("\n").map((l) => JSON.parse(l));
  samples.sort((a, b) => a.sample_index - b.sample_index);
  return { samples, summary: JSON.parse(summary) };
}

async function inBrowser(page, c) {
  await page.setChecked("#chat", Boolean(c.chat));
  await page.fill("#prompt", c.chat ?? c.text ?? prompt);
  await page.fill("#n", String(c.n));
  await page.fill("#max-tokens", String(c.max_tokens));
  await page.fill("#temperature", String(c.temperature));
  await page.fill("#top-p", String(c.top_p));
  await page.fill("#seed", String(c.seed));
  await page.selectOption("#kernels", c.kernels ?? "auto");
  await page.click("#run");
  if (c.screenshot) {
    // Mid-rollout, while the samples share the prompt's blocks and grow their own.
    await page.waitForFunction(
      () => Number(document.getElementById("stat-steps").textContent) >= 12 ||
        ["done", "error"].includes(window.sproutDemo.state),
      null, { timeout: CASE_TIMEOUT_MS });
    await page.screenshot({ path: `${outDir}/screenshot.png` });
  }
  await page.waitForFunction(() => ["done", "error"].includes(window.sproutDemo.state), null, {
    timeout: CASE_TIMEOUT_MS,
  });
  const demo = await page.evaluate(() => window.sproutDemo);
  if (demo.state !== "done") throw new Error(`${c.name}: the page failed: ${demo.lastError}`);
  return demo.lastResult;
}

// The longest gap between timer ticks on the page over `ms`: with the engine in its
// worker, the page's own thread stays free while it generates.
const longestGap = (page, ms) => page.evaluate((ms) => new Promise((resolve) => {
  let last = performance.now();
  let gap = 0;
  const end = last + ms;
  const tick = () => {
    const now = performance.now();
    gap = Math.max(gap, now - last);
    last = now;
    if (now < end) setTimeout(tick, 10);
    else resolve(gap);
  };
  setTimeout(tick, 10);
}), ms);

// A long rollout stopped with the Stop button after a few steps: it ends as "stopped",
// its samples keep the tokens they had, and no KV block is held any more.
async function stopCase(page) {
  await page.setChecked("#chat", false);
  await page.fill("#prompt", prompt);
  await page.fill("#n", "4");
  await page.fill("#max-tokens", "400");
  await page.fill("#temperature", "0.8");
  await page.selectOption("#kernels", "auto");
  await page.click("#run");
  await page.waitForFunction(
    () => (window.sproutDemo.lastStep && window.sproutDemo.lastStep.step >= 4) ||
      ["done", "error"].includes(window.sproutDemo.state),
    null, { timeout: CASE_TIMEOUT_MS });
  const gap = await longestGap(page, 3000);
  const heldBefore = await page.evaluate(() =>
    window.sproutDemo.lastStep.pool.filter((b) => b.use === "shared" || b.use === "private").length);
  await page.click("#stop");
  await page.waitForFunction(() => ["stopped", "done", "error"].includes(window.sproutDemo.state), null, {
    timeout: CASE_TIMEOUT_MS,
  });
  const demo = await page.evaluate(() => window.sproutDemo);
  if (demo.state !== "stopped") throw new Error(`stop: the page ended in state ${demo.state}: ${demo.lastError}`);
  const r = demo.lastResult;
  const held = demo.lastStep.pool.filter((b) => b.use === "shared" || b.use === "private").length;
  const shown = (await page.textContent("#stat-blocks")).trim();
  if (!r.stopped || r.blocks_in_use !== 0 || held !== 0 || !demo.lastStep.stopped || !shown.startsWith("0 /")) {
    throw new Error(`stop: stopped ${r.stopped}, ${r.blocks_in_use} blocks in use, the block map holds ` +
      `${held} and shows "${shown}"`);
  }
  if (heldBefore === 0) throw new Error("stop: no block was in use before Stop, so freeing proves nothing");
  if (r.samples.length !== 4 || r.samples.some((s) => s.finish_reason !== "abort" && s.finish_reason !== "stop")) {
    throw new Error(`stop: samples ${JSON.stringify(r.samples.map((s) => s.finish_reason))}`);
  }
  if (gap > 1000) throw new Error(`the page froze for ${gap.toFixed(0)} ms while the engine ran`);
  console.log(`stop: after ${r.steps} steps and ${r.generated_tokens} tokens; ${heldBefore} KV blocks ` +
    `held before, ${held} after (the block map shows ${shown}); the page's longest pause while ` +
    `generating: ${gap.toFixed(0)} ms`);
  return { case: "stop", steps: r.steps, tokens: r.generated_tokens, blocks_before: heldBefore, blocks_after: held,
    longest_pause_ms: Math.round(gap) };
}

function compare(c, nat, web) {
  if (web.samples.length !== nat.samples.length) {
    throw new Error(`${c.name}: ${web.samples.length} samples in the browser, ${nat.samples.length} native`);
  }
  nat.samples.forEach((n, k) => {
    const w = web.samples[k].token_ids;
    const same = w.length === n.token_ids.length && w.every((t, i) => t === n.token_ids[i]);
    if (!same) {
      const at = w.findIndex((t, i) => t !== n.token_ids[i]);
      throw new Error(
        `${c.name}: sample ${k} differs from the native run at token ${at}:\n` +
          `  browser ${JSON.stringify(w)}\n  native  ${JSON.stringify(n.token_ids)}`,
      );
    }
  });
}

// A fresh profile directory each run (web/test.sh empties OUT_DIR).
const browser = await chromium.launchPersistentContext(`${outDir}/chromium-profile`, {
  executablePath: "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1440, height: 1000 },
  args: [
    "--headless=new", "--no-sandbox", "--enable-unsafe-webgpu",
    // SwiftShader's Vulkan under Chromium's WebGPU: no GPU needed.
    "--enable-features=Vulkan", "--use-angle=swiftshader", "--use-webgpu-adapter=swiftshader",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-quic", "--no-first-run",
  ],
});
let failed = false;
try {
  const page = await browser.newPage();
  page.on("pageerror", (e) => console.log(`page error: ${e.message}`));
  page.on("console", (m) => m.type() === "error" && console.log(`page console: ${m.text()}`));
  await page.goto(baseUrl);
  await page.waitForFunction(() => window.sproutDemo && window.sproutDemo.state !== "starting", null, {
    timeout: 60000,
  });
  const start = await page.evaluate(() => window.sproutDemo);
  if (start.state !== "ready") {
    throw new Error(`the page found no WebGPU adapter: ${await page.textContent("#no-webgpu")}`);
  }
  console.log(`browser adapter: ${await page.textContent("#adapter")}`);
  await loadModel(page, modelUrl);

  const report = [];
  let loaded = "default";
  for (const c of cases.filter((c) => wanted(c.name))) {
    if ((c.model || "default") !== loaded) {
      loaded = c.model || "default";
      await loadModel(page, models[loaded].url);
    }
    const nat = native(c);
    const web = await inBrowser(page, c);
    writeFileSync(`${outDir}/browser-${c.name}.json`, JSON.stringify(web, null, 1));
    compare(c, nat, web);
    const line = {
      case: c.name,
      samples: c.n,
      tokens: web.generated_tokens,
      browser_tokens_per_s: Number(web.tokens_per_s.toFixed(2)),
      native_tokens_per_s: Number(nat.summary.generated_tokens_per_s.toFixed(2)),
      native_adapter: nat.samples[0].provenance.adapter,
    };
    report.push(line);
    console.log(`${c.name}: ${c.n} samples x ${c.max_tokens} tokens equal to native; ` +
      `browser ${line.browser_tokens_per_s} tokens/s, native ${line.native_tokens_per_s} tokens/s`);
    if (c.chat) {
      console.log(`${c.name}: "${c.chat}" -> ${JSON.stringify(web.samples[0].text)} ` +
        `(prompt ${web.prompt_token_ids.length} tokens)`);
    }
  }
  if (wanted("stop")) {
    if (loaded !== "default") await loadModel(page, modelUrl);
    report.push(await stopCase(page));
  }
  writeFileSync(`${outDir}/report.json`, JSON.stringify(report, null, 1));

  // A file that is not a model: the page names the problem and keeps the loaded model.
  await page.setInputFiles("#model-file", {
    name: "notes.gguf", mimeType: "application/octet-stream", buffer: Buffer.from("not a model"),
  });
  await page.waitForFunction(() => window.sproutDemo.state === "error", null, { timeout: 60000 });
  const badLoad = (await page.textContent("#model-status")).trim();
  const kept = await page.evaluate(() => window.sproutDemo.model && window.sproutDemo.model.name);
  if (!badLoad.includes("notes.gguf") || !kept || (await page.isDisabled("#run"))) {
    throw new Error(`after loading a file that is not a model the page says "${badLoad}", ` +
      `model ${kept}, Generate ${(await page.isDisabled("#run")) ? "disabled" : "enabled"}`);
  }
  console.log(`a file that is not a model: ${badLoad}`);

  // A browser without WebGPU: the page must say so and what to use, not fail silently.
  const bare = await browser.newPage();
  await bare.addInitScript(() => delete Navigator.prototype.gpu);
  await bare.goto(baseUrl);
  await bare.waitForFunction(() => window.sproutDemo && window.sproutDemo.state !== "starting", null, {
    timeout: 60000,
  });
  const said = (await bare.textContent("#no-webgpu")).trim();
  const state = await bare.evaluate(() => window.sproutDemo.state);
  if (state !== "no-webgpu" || !(await bare.isVisible("#no-webgpu")) || !said.includes("Chrome")) {
    throw new Error(`without WebGPU the page is in state "${state}" and says: "${said}"`);
  }
  console.log(`without WebGPU the page says: ${said}`);
  console.log(`screenshot: ${outDir}/screenshot.png`);
} catch (err) {
  failed = true;
  console.error(`web test FAILED: ${err.message}`);
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
