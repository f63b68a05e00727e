// langchain-js: a LangChain.js agent (langchain v1's createAgent, named weather_agent, on
// @langchain/openai's ChatOpenAI pointed at the scripted LLM) with get_weather as a `tool`,
// instrumented by OpenInference's LangChain.js instrumentation (LangChainInstrumentation,
// manuallyInstrument(CallbackManagerModule) as its README shows) on the OTel JS SDK 2.x
// (NodeTracerProvider, BatchSpanProcessor, OTLP/HTTP protobuf exporter). The streaming scenario
// streams the agent's messages (streamMode "messages", ChatOpenAI streaming: true).
// `node agent.mjs SCENARIO` (copied beside the stack's node_modules by record.py).
// The agent side of tests/conformance/stacks/common.py, in JavaScript: the prompt with its
// [scenario:NAME] marker, get_weather (throws for Atlantis; in non_terminating flushes the
// telemetry and exits on its 3rd call, so the run never ends), the remote traceparent.
import { context, propagation } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { LangChainInstrumentation } from '@arizeai/openinference-instrumentation-langchain';
import * as CallbackManagerModule from '@langchain/core/callbacks/manager';
import { MemorySaver } from '@langchain/langgraph';
import { ChatOpenAI } from '@langchain/openai';
import { createAgent, tool } from 'langchain';
import { z } from 'zod';

const AGENT_NAME = 'weather_agent';
const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
const scenario = process.argv[2];

// The OTel JS SDK as a user sets it up: endpoint and service name from OTEL_* variables.
const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ 'service.name': process.env.OTEL_SERVICE_NAME }),
  spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
});
provider.register();
new LangChainInstrumentation().manuallyInstrument(CallbackManagerModule);

let calls = 0;
const getWeather = tool(async ({ city }) => {
  calls += 1;
  if (scenario === 'non_terminating' && calls === 3) {
    await provider.forceFlush(); // finished spans reach the collector; open ones never do
    process.exit(0);
  }
  if (city === 'Atlantis') throw new Error('unknown city: Atlantis');
  return `sunny, 22 C in ${city}`;
}, {
  name: 'get_weather',
  description: 'Get the current weather for a city.',
  schema: z.object({ city: z.string() }),
});

const agent = createAgent({
  name: AGENT_NAME,
  model: new ChatOpenAI({ model: 'gpt-4o-mini', apiKey: process.env.OPENAI_API_KEY,
                          configuration: { baseURL: process.env.OPENAI_BASE_URL },
                          streaming: scenario === 'streaming' }),
  tools: [getWeather],
  systemPrompt: 'You are a weather assistant. Use get_weather.',
});
const input = { messages: [{ role: 'user',
                             content: `What is the weather in Paris? [scenario:${scenario}]` }] };

// multi_agent: a coordinator whose one tool runs the weather agent (LangChain's subagents as
// tools), the sub-agent's last message the tool's result.
const askWeatherAgent = tool(async ({ question }) => {
  const result = await agent.invoke({ messages: [{ role: 'user', content: question }] },
                                    { recursionLimit: 30 });
  return result.messages.at(-1).content;
}, {
  name: 'ask_weather_agent',
  description: 'Ask the weather agent a weather question.',
  schema: z.object({ question: z.string() }),
});

async function run() {
  if (scenario === 'multi_agent') {
    const coordinator = createAgent({
      name: 'triage_agent',
      model: new ChatOpenAI({ model: 'gpt-4o-mini', apiKey: process.env.OPENAI_API_KEY,
                              configuration: { baseURL: process.env.OPENAI_BASE_URL } }),
      tools: [askWeatherAgent],
      systemPrompt: 'Ask the weather agent about the weather.',
    });
    const result = await coordinator.invoke(input, { recursionLimit: 30 });
    return result.messages.at(-1).content;
  }
  if (scenario === 'streaming') {
    let text = '';
    for await (const [chunk] of await agent.stream(input, { streamMode: 'messages' })) {
      if (chunk.getType?.() === 'ai' && typeof chunk.content === 'string') text += chunk.content;
    }
    return text;
  }
  // max_turns: a graph's cap on steps (two a turn: the model, the tools), which throws
  const recursionLimit = scenario === 'max_turns' ? 6 : 30;
  const result = await agent.invoke(input, { recursionLimit });
  return result.messages.at(-1).content;
}

// The conversation scenario: a thread (configurable.thread_id, a MemorySaver checkpointer
// keeping the earlier turns), one invoke per user turn, as LangChain's docs show for chats.
const CONVERSATION_ID = 'conv-weather-0001';
const QUESTIONS = ['What is the weather in Paris?', 'And in London?', 'And in Tokyo?'];

async function conversation() {
  const chat = createAgent({
    name: AGENT_NAME,
    model: new ChatOpenAI({ model: 'gpt-4o-mini', apiKey: process.env.OPENAI_API_KEY,
                            configuration: { baseURL: process.env.OPENAI_BASE_URL } }),
    tools: [getWeather],
    systemPrompt: 'You are a weather assistant. Use get_weather.',
    checkpointer: new MemorySaver(),
  });
  let text = '';
  for (const [i, question] of QUESTIONS.entries()) {
    const result = await chat.invoke(
      { messages: [{ role: 'user', content: `${question} [scenario:conversation] [turn:${i + 1}]` }] },
      { recursionLimit: 30, configurable: { thread_id: CONVERSATION_ID } });
    text = result.messages.at(-1).content;
  }
  return text;
}

const parent = scenario === 'remote_parent'
  ? propagation.extract(context.active(), { traceparent: TRACEPARENT })
  : context.active();
let text;
try {
  text = await context.with(parent, scenario === 'conversation' ? conversation : run);
} finally {
  await provider.shutdown();  // what the run recorded is exported, also when it threw
}
if (!text && scenario !== 'empty_answer') throw new Error('no final answer');
