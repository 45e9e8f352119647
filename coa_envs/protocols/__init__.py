"""How a model calls tools: the CoA tag grammar (:mod:`coa_envs.protocol`) and OpenAI-style
function calling (:mod:`coa_envs.protocols.tools`). Tools, rewards and limits are shared."""
