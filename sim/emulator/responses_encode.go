package emulator

import "strconv"

// appendResponse appends the Response object: finished (completed or
// incomplete, with output and usage), or in progress with no output.
func (a *respAnswer) appendResponse(b []byte, done bool) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, a.id)
	b = append(b, `,"object":"response","created_at":`...)
	b = strconv.AppendInt(b, a.created, 10)
	b = append(b, `,"status":`...)
	switch {
	case !done:
		b = append(b, `"in_progress","completed_at":null`...)
	default:
		b = appendString(b, a.status())
		b = append(b, `,"completed_at":`...)
		b = strconv.AppendInt(b, a.created, 10)
	}
	b = append(b, `,"background":false,"error":null,"incomplete_details":`...)
	if done && a.incomplete {
		b = append(b, `{"reason":"max_output_tokens"}`...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"instructions":`...)
	if a.instructions != nil {
		b = appendString(b, *a.instructions)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"max_output_tokens":`...)
	if a.maxOutput != nil {
		b = strconv.AppendInt(b, int64(*a.maxOutput), 10)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"model":`...)
	b = appendString(b, a.model)
	b = append(b, `,"output":[`...)
	if done {
		b = a.appendItem(b, true)
	}
	b = append(b, `],"parallel_tool_calls":true,"previous_response_id":`...)
	if a.previous != nil {
		b = appendString(b, *a.previous)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"reasoning":{"effort":null,"summary":null},"service_tier":"default","store":`...)
	b = strconv.AppendBool(b, a.store)
	b = append(b, `,"temperature":1,"text":{"format":{"type":"text"}},"tool_choice":`...)
	b = appendRawOr(b, a.toolChoice, `"auto"`)
	b = append(b, `,"tools":`...)
	b = appendRawOr(b, a.tools, `[]`)
	b = append(b, `,"top_p":1,"truncation":"disabled"`...)
	if done { // the spec's usage is not nullable: a response in progress has none
		b = a.appendUsage(append(b, `,"usage":`...))
	}
	return append(b, `,"metadata":{}}`...) // no user: the spec types it a string, not nullable
}

// status is a finished response's status.
func (a *respAnswer) status() string {
	if a.incomplete {
		return "incomplete"
	}
	return "completed"
}

// appendRawOr appends raw as sent, or def when it is absent or null.
func appendRawOr(b, raw []byte, def string) []byte {
	if len(raw) == 0 || string(raw) == "null" {
		return append(b, def...)
	}
	return append(b, raw...)
}

// appendItem appends the output item: a message with one output_text
// part, or a function_call; when not done, as output_item.added shows it.
func (a *respAnswer) appendItem(b []byte, done bool) []byte {
	status := "in_progress"
	if done {
		status = a.status()
		if a.call != nil {
			status = "completed"
		}
	}
	if a.call != nil {
		b = append(b, `{"type":"function_call","id":`...)
		b = appendString(b, a.itemID)
		b = append(b, `,"call_id":`...)
		b = appendString(b, a.callID)
		b = append(b, `,"name":`...)
		b = appendString(b, a.call.name)
		b = append(b, `,"arguments":`...)
		if done {
			b = appendString(b, a.call.args)
		} else {
			b = append(b, `""`...)
		}
		b = append(b, `,"status":`...)
		b = appendString(b, status)
		return append(b, '}')
	}
	b = append(b, `{"type":"message","id":`...)
	b = appendString(b, a.itemID)
	b = append(b, `,"status":`...)
	b = appendString(b, status)
	b = append(b, `,"role":"assistant","content":[`...)
	if done {
		b = a.appendPart(b, a.text.text())
	}
	return append(b, "]}"...)
}

// appendPart appends an output_text part.
func (a *respAnswer) appendPart(b []byte, text string) []byte {
	b = append(b, `{"type":"output_text","text":`...)
	b = appendString(b, text)
	return append(b, `,"annotations":[],"logprobs":[]}`...)
}

// appendUsage appends a ResponseUsage object.
func (a *respAnswer) appendUsage(b []byte) []byte {
	out := a.outputTokens()
	b = append(b, `{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(a.prompt), 10)
	b = append(b, `,"input_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, int64(a.cached), 10)
	b = append(b, `,"cache_write_tokens":0},"output_tokens":`...)
	b = strconv.AppendInt(b, int64(out), 10)
	b = append(b, `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`...)
	b = strconv.AppendInt(b, int64(a.prompt+out), 10)
	return append(b, '}')
}
