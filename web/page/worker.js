// The demo page's engine thread: a dedicated module worker that owns sprout's wasm engine
// and its WebGPU device (WebGPU is there in workers as `navigator.gpu`), so that loading a
// model and running a rollout never block the page.
//
// The page (app.js) and this worker speak in messages, one request at a time except
// `stop`, which arrives while a rollout runs and is read by the engine between steps:
//   page -> worker: {type: "open"}, {type: "load", name, bytes}, {type: "rollout", options},
//                   {type: "stop"}
//   worker -> page: {type: "opened", adapter}, {type: "loaded", model},
//                   {type: "step", report}, {type: "result", result},
//                   {type: "error", op, message, kept}
// Reports cross as the JSON strings the bindings make; nothing here computes anything.

import init, { Session } from "./pkg/sprout_web.js";

let session = null;

const post = (message) => postMessage(message);

async function open() {
  await init();
  session = await Session.open();
  const adapter = JSON.parse(session.adapter());
  if (!adapter.name) {
    // Browsers leave wgpu's adapter name empty; WebGPU's own adapter info names it.
    const info = (await navigator.gpu.requestAdapter())?.info;
    if (info) adapter.name = info.description || [info.vendor, info.architecture].filter(Boolean).join(" ");
  }
  post({ type: "opened", adapter });
}

async function rollout(options) {
  const result = await session.rollout(JSON.stringify(options), (json) => post({ type: "step", report: json }));
  post({ type: "result", result });
}

const handlers = {
  open,
  load: ({ name, bytes }) => post({ type: "loaded", model: session.load_model(name, new Uint8Array(bytes)) }),
  rollout: ({ options }) => rollout(options),
  // Read by the running rollout between steps; with none running it does nothing.
  stop: () => session?.stop(),
};

self.onmessage = async (event) => {
  const message = event.data;
  const handler = handlers[message.type];
  if (!handler) {
    post({ type: "error", op: message.type, message: `unknown request ${message.type}` });
    return;
  }
  try {
    await handler(message);
  } catch (err) {
    post({
      type: "error",
      op: message.type,
      message: String(err && err.message ? err.message : err),
      kept: session ? session.model_name() ?? null : null,
    });
  }
};
