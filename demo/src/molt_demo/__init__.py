"""``molt demo``: watch a real agent evolve through Molt, end to end, on a laptop.

Two tenants run the support-desk agent of :mod:`molt_desk.world` — its model calls made with
LangChain's ``ChatOpenAI`` (tools bound with ``bind_tools``, tools as LangChain ``StructuredTool``\\s)
against Molt's OpenAI-compatible gateway on a loopback port:

- **acme** deploys the current integration; its consumers need JSON answers for status requests
  (a format failure), its knowledge base lacks the refund window (a missing fact), its refunds skip
  the lookup (a procedural failure);
- **globex** runs the legacy integration whose ``lookup_order`` schema confuses the model (tool-schema
  confusion) and its knowledge base lacks the warranty period;
- both ask tax arithmetic the model cannot do (a capability gap only a weight update can close).

Every call is captured (gateway → Recorder → LanceDB), rewarded by the task verifier through the
gateway's reward endpoint, and some failures get a *late* user correction in the next round. After
each round the control plane runs one cycle per agent: it diagnoses failure clusters, replays
candidates on them, gates them, canaries the winner (half the sessions) and promotes or aborts it the
next round. The success rate climbs as interventions land. At the end: a table in the terminal, an
HTML report with plots (success per tenant over rounds with intervention markers, reward, cost per
success, the decision log) and a PNG of the main curve, and every stored trajectory's hash chain
verified.

``--quick`` (CI) runs 8 rounds of 12 requests per tenant in a few minutes. Without ``--train`` the weight
update is only requested (the scripted desk model has no weights), so the capability cluster is reported
as "weight update requested" and stays failing.

``--train`` (needs molt-trainer) adds a real policy model: the gateway gets a second backend, SmolLM2-135M
on the local backend, and both tenants run a third agent, ``molt-math`` (:mod:`molt_demo.math_agent`),
whose replies must open with a number — a capability gap of the model. The plane waits a cycle for late
corrections (none come), replays the context fixes it has for that cluster, finds none that works, and asks
for a weight update; the trainer hook
(:mod:`molt_demo.training`) trains a LoRA adapter on the agent's recorded token-level trajectories,
hot-loads it into the backend and returns its model part; the plane canaries it and promotes it, and the
math success rate climbs. The report's fixes table credits each change per version: success served under
the version it made against its parent's (the versions in the trajectories' provenance).

Library messages (model load reports, warnings, progress bars) go to ``molt-demo.log`` beside the report.

The parts, one idea each: :mod:`~molt_demo.traffic` (tenants, keys, each round's requests),
:mod:`~molt_demo.langchain_agent` (the agent's LangChain model client and tools), :mod:`~molt_demo.rounds`
(the round loop), :mod:`~molt_demo.train_mode` (what ``--train`` adds), :mod:`~molt_demo.credit` (which
version fixed which cluster), :mod:`~molt_demo.report` (plots and the Jinja2 HTML report),
:mod:`~molt_demo.run` (one run composed) and :mod:`~molt_demo.app` (the command line).
"""
