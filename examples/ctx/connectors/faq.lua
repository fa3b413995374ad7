-- faq: question/answer entries as documents, from the config (`entries`) or a JSON URL (`url`).
-- Each entry: { id, question, answer, tags = {...}, updated = "YYYY-MM-DD" (optional) }.
connector = {}

local function load_entries(config)
  if config.url then
    local resp = http.get(config.url, { timeout = 5, headers = { accept = "application/json" } })
    if not resp.ok then
      error("faq: " .. config.url .. " answered HTTP " .. resp.status)
    end
    return json.decode(resp.body)
  end
  return config.entries or {}
end

function connector.scan(config)
  local items = {}
  for i, entry in ipairs(load_entries(config)) do
    if type(entry.question) ~= "string" or type(entry.answer) ~= "string" then
      error("faq: entry " .. i .. " needs a question and an answer")
    end
    items[#items + 1] = {
      source_id = entry.id or ("entry-" .. i),
      title = entry.question,
      body = "# " .. entry.question .. "\n\n" .. entry.answer .. "\n",
      updated_at = entry.updated,
      source_url = config.url,
      metadata = { tags = entry.tags or {} },
    }
  end
  log.info("faq: " .. #items .. " entries")
  return items
end
