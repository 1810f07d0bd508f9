// HTTP helpers of the LLM server: typed errors as JSON replies, and a bounded JSON body.

import type { IncomingMessage, ServerResponse } from 'node:http'

/** A reply other than 200: `status`, with `{ error: { code, message } }`. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message)
  }
}

export function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) })
  res.end(text)
}

/** The request's body parsed as JSON: 413 past `maxBytes`, 400 PARSE_ERROR when it is not JSON. */
export function readJson(req: IncomingMessage, maxBytes: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    req.on('data', (c: Buffer) => {
      size += c.length
      if (size > maxBytes) {
        reject(new HttpError(413, 'INVALID_ARGUMENT', `request body above ${maxBytes} bytes`))
        req.destroy()
      } else chunks.push(c)
    })
    req.on('end', () => {
      try {
        resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')))
      } catch {
        reject(new HttpError(400, 'PARSE_ERROR', 'the body must be JSON'))
      }
    })
    req.on('error', reject)
  })
}
