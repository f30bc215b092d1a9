// What every canvas chart of the UI sets up alike: a focusable canvas read as an image with a
// tooltip beside it, a backing store sized for the screen's pixel ratio, and striped fills.

/** A focusable canvas (role img) and a hidden tooltip, appended to `host`. */
export function createCanvas(host, className) {
  const canvas = document.createElement("canvas");
  canvas.className = className;
  canvas.tabIndex = 0;
  canvas.setAttribute("role", "img");
  const tip = document.createElement("div");
  tip.className = "tooltip";
  tip.hidden = true;
  host.append(canvas, tip);
  return { canvas, tip, ctx: canvas.getContext("2d") };
}

/** Sizes the canvas to `width` x `height` CSS pixels, sharp on any pixel ratio. */
export function fitCanvas(canvas, width, height) {
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
}

/** Draws in CSS pixels from here on: the pixel ratio's transform, and a cleared canvas. */
export function startPaint(ctx, width, height) {
  const dpr = window.devicePixelRatio || 1;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, width, height);
}

/** A repeating fill of `colour` crossed by light diagonal lines, `size` pixels a tile. */
export function stripes(ctx, colour, { size = 6, alpha = 0.35, lineWidth = 1.5, lines = [[-1, size + 1, size + 1, -1]] } = {}) {
  const tile = document.createElement("canvas");
  tile.width = size;
  tile.height = size;
  const t = tile.getContext("2d");
  t.fillStyle = colour;
  t.fillRect(0, 0, size, size);
  t.strokeStyle = `rgba(255,255,255,${alpha})`;
  t.lineWidth = lineWidth;
  t.beginPath();
  for (const [x0, y0, x1, y1] of lines) {
    t.moveTo(x0, y0);
    t.lineTo(x1, y1);
  }
  t.stroke();
  return ctx.createPattern(tile, "repeat");
}
