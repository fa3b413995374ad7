-- oncall: an agent whose prompt starts from the runbooks that match the incident's topic.
-- ctx checks the arguments first (a missing `topic` is refused before this runs). context.search
-- uses the agent's search defaults from ctx.toml (search_limit = 3 here) unless given others.
agent = {}

function agent.resolve(args, config, context)
  local hits = context.search(args.topic)
  local lines = {}
  for i, hit in ipairs(hits) do
    lines[#lines + 1] = string.format("%d. %s (id %s): %s", i, hit.title, hit.id, hit.snippet)
  end
  local found = #lines > 0 and table.concat(lines, "\n") or "No document matches; search with other words."
  return {
    system = context.system_prompt .. "\n\nDocuments that match '" .. args.topic .. "':\n" .. found
      .. "\n\nRead them with `get` before advising, and say which one each step comes from.",
    messages = {
      { role = "assistant", content = "I have " .. #hits .. " matching document(s) for " .. args.topic
        .. ". What is happening right now?" },
    },
  }
end

return agent
