// Drives `sluice serve` with the official OpenAI Node.js SDK: argv[2] is
// the base URL of the exact phase, argv[3] the retry phase's. Prints one
// JSON object of what happened.
import OpenAI from "openai";

const [exactURL, retryURL] = process.argv.slice(2);
const out = { exact: [], retry: { attempts: [] } };

// Phase 1: streaming and non-streaming calls, no retries, until the
// tokens-per-minute budget refuses three in a row.
const exact = new OpenAI({ baseURL: exactURL, apiKey: "sk-exact", maxRetries: 0 });
let refusals = 0;
for (let i = 0; refusals < 3 && i < 200; i++) {
  const stream = i % 2 === 1;
  const usage = i % 5 !== 3; // every fifth call streams without asking for usage, or asks without streaming
  const params = { model: "fake", max_tokens: 40, messages: [{ role: "user", content: `call ${i}` }] };
  try {
    if (stream) {
      const s = await exact.chat.completions.create({ ...params, stream: true, ...(usage ? { stream_options: { include_usage: true } } : {}) });
      let text = "", total = null;
      for await (const chunk of s) {
        if (chunk.choices.length > 0) text += chunk.choices[0].delta.content ?? "";
        if (chunk.usage) total = chunk.usage.total_tokens;
      }
      out.exact.push({ i, stream, status: 200, text, total });
    } else {
      const r = await exact.chat.completions.create(params);
      out.exact.push({ i, stream, status: 200, text: r.choices[0].message.content, total: r.usage.total_tokens });
    }
    refusals = 0;
  } catch (e) {
    if (!(e instanceof OpenAI.APIError)) throw e;
    out.exact.push({ i, stream, status: e.status, retryAfter: e.headers?.["retry-after"] ?? null });
    refusals++;
  }
}

// Phase 2: the SDK's own retries against a budget that refills within
// seconds; a fetch wrapper records every attempt the SDK makes.
const retry = new OpenAI({
  baseURL: retryURL, apiKey: "sk-retry", maxRetries: 3,
  fetch: async (url, init) => {
    const at = Date.now();
    const r = await fetch(url, init);
    out.retry.attempts.push({ at, status: r.status, retryAfter: r.headers.get("retry-after") });
    return r;
  },
});
for (let i = 0; i < 3; i++) {
  const r = await retry.chat.completions.create({ model: "fake", max_tokens: 40, messages: [{ role: "user", content: "again" }] });
  out.retry.totals = [...(out.retry.totals ?? []), r.usage.total_tokens];
}
console.log(JSON.stringify(out));
