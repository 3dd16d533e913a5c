// ollama-js against a server: node client.mjs HOST MODEL PROMPT -> one JSON line with what it got.
// Run by tests/test_proxy.py, once through the proxy and once straight to upstream.
import { Ollama } from "ollama";

const [host, model, prompt] = process.argv.slice(2);
const client = new Ollama({ host });
const options = { temperature: 0, num_predict: 40 };

const generated = await client.generate({ model, prompt, options });
let streamed = "";
let last = null;
for await (const part of await client.chat({ model, messages: [{ role: "user", content: prompt }], options, stream: true })) {
  streamed += part.message.content;
  last = part;
}
const models = (await client.list()).models.map((m) => m.name);
console.log(JSON.stringify({
  generate: generated.response, generate_done: generated.done, eval_count: generated.eval_count,
  chat: streamed, chat_done: last.done, chat_done_reason: last.done_reason, models,
}));
