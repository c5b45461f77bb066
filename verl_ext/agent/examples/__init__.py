"""Example agents: standalone programs that use only the `openai` client and the environment variables the
`external_agent` loop sets (OPENAI_BASE_URL, OPENAI_API_KEY, AGENT_TASK, AGENT_SCORE_URL). See docs/AGENT.md."""
