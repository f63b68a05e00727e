// vercel-ai-openinference: the Vercel AI SDK's own telemetry (`experimental_telemetry`) passed
// through OpenInference's span processor (@arizeai/openinference-vercel), which adds the
// OpenInference attributes to each AI SDK span before the OTLP/HTTP protobuf exporter sends it,
// as Phoenix's docs show for the AI SDK (spanFilter isOpenInferenceSpan).
// `node agent.mjs SCENARIO` (copied beside the stack's node_modules by record.py).
// The agent side of tests/conformance/stacks/common.py, in JavaScript: the prompt with its
// [scenario:NAME] marker, get_weather (throws for Atlantis; in non_terminating flushes the
// telemetry and exits on its 3rd call, so the run never ends), the remote traceparent.
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { Resource } from '@opentelemetry/resources';
import { BasicTracerProvider } from '@opentelemetry/sdk-trace-base';
import { isOpenInferenceSpan, OpenInferenceBatchSpanProcessor } from '@arizeai/openinference-vercel';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, stepCountIs, streamText, tool } from 'ai';
import { z } from 'zod';

const AGENT_NAME = 'weather_agent';
const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
const scenario = process.argv[2];

// The OTel JS SDK (1.x, what the processor is built for) as a user sets it up: endpoint and service name from OTEL_* variables.
const provider = new BasicTracerProvider({
  resource: new Resource({ 'service.name': process.env.OTEL_SERVICE_NAME }),
  spanProcessors: [new OpenInferenceBatchSpanProcessor({
    exporter: new OTLPTraceExporter(), spanFilter: isOpenInferenceSpan })],
});
trace.setGlobalTracerProvider(provider);
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
propagation.setGlobalPropagator(new W3CTraceContextPropagator());

let calls = 0;
const getWeather = tool({
  description: 'Get the current weather for a city.',
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => {
    calls += 1;
    if (scenario === 'non_terminating' && calls === 3) {
      await provider.forceFlush(); // finished spans reach the collector; open ones never do
      process.exit(0);
    }
    if (city === 'Atlantis') throw new Error('unknown city: Atlantis');
    return `sunny, 22 C in ${city}`;
  },
});

const openai = createOpenAI({ baseURL: process.env.OPENAI_BASE_URL,
                              apiKey: process.env.OPENAI_API_KEY });
const options = {
  model: openai.chat('gpt-4o-mini'),
  system: 'You are a weather assistant. Use get_weather.',
  prompt: `What is the weather in Paris? [scenario:${scenario}]`,
  tools: { get_weather: getWeather },
  // generous: the scripted scenarios need at most 7 steps; max_turns: the cap it tests
  stopWhen: stepCountIs(scenario === 'max_turns' ? 3 : 12),
  experimental_telemetry: { isEnabled: true, functionId: AGENT_NAME },
};

// multi_agent: a coordinator whose one tool runs the weather agent (an agent called as a
// tool, as the AI SDK's docs show for subagents), each named by its telemetry functionId.
const askWeatherAgent = tool({
  description: 'Ask the weather agent a weather question.',
  inputSchema: z.object({ question: z.string() }),
  execute: async ({ question }) => (await generateText({ ...options, prompt: question })).text,
});

async function run() {
  if (scenario === 'multi_agent') {
    return (await generateText({
      ...options, system: 'Ask the weather agent about the weather.',
      tools: { ask_weather_agent: askWeatherAgent },
      experimental_telemetry: { ...options.experimental_telemetry, functionId: 'triage_agent' },
    })).text;
  }
  if (scenario === 'streaming') {
    const result = streamText(options);
    let text = '';
    for await (const part of result.textStream) text += part;
    return text;
  }
  return (await generateText(options)).text;
}

// The conversation scenario: one generateText per user turn (each its own trace), the
// conversation id in the telemetry metadata as the AI SDK's docs show (metadata.sessionId).
const CONVERSATION_ID = 'conv-weather-0001';
const QUESTIONS = ['What is the weather in Paris?', 'And in London?', 'And in Tokyo?'];

async function conversation() {
  let text = '';
  for (const [i, question] of QUESTIONS.entries()) {
    text = (await generateText({
      ...options, prompt: `${question} [scenario:conversation] [turn:${i + 1}]`,
      experimental_telemetry: { ...options.experimental_telemetry,
                                metadata: { sessionId: CONVERSATION_ID } },
    })).text;
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
if (!text && scenario !== 'max_turns' && scenario !== 'empty_answer') throw new Error('no final answer');
