-- find_mentions: which documents mention a term, grouped by source.
-- Parameters are validated by ctx before execute runs (a missing `term` is a 400 naming it).
tool = {
  name = "find_mentions",
  description = "List the documents that mention a term, grouped by source, with one line of context each.",
  parameters = {
    { name = "term", type = "string", required = true, description = "word or phrase to look for" },
    { name = "limit", type = "integer", default = 5, description = "maximum number of documents" },
    { name = "mode", type = "string", default = "keyword", enum = { "keyword", "semantic", "hybrid" } },
  },
}

function tool.execute(params, context)
  local hits = context.search(params.term, { mode = params.mode, limit = params.limit })
  local by_source, order = {}, {}
  for _, hit in ipairs(hits) do
    if not by_source[hit.source] then
      by_source[hit.source] = {}
      order[#order + 1] = hit.source
    end
    table.insert(by_source[hit.source], { id = hit.id, title = hit.title, line = hit.snippet:sub(1, 120) })
  end
  local groups = {}
  for _, source in ipairs(order) do
    groups[#groups + 1] = { source = source, documents = by_source[source] }
  end
  log.info("find_mentions: " .. #hits .. " hit(s) for " .. json.encode(params.term))
  return {
    heading = (context.config.heading or "Mentions") .. ": " .. params.term,
    count = #hits,
    groups = groups,
  }
end
