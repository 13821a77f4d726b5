package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/zerodrop/zerodrop/internal/load"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// bucketMS is the width of the load's buckets (its default).
const bucketMS = 100

var markColor = color.RGBA{R: 120, G: 120, B: 120, A: 255}

// classStyle is how each failure class is drawn.
var classStyle = map[load.Class]draw.GlyphStyle{
	load.Reset:   {Color: color.RGBA{R: 200, A: 255}, Shape: draw.CircleGlyph{}, Radius: vg.Points(2.5)},
	load.Refused: {Color: color.RGBA{R: 230, G: 140, A: 255}, Shape: draw.BoxGlyph{}, Radius: vg.Points(2.5)},
	load.EOF:     {Color: color.RGBA{R: 120, B: 180, A: 255}, Shape: draw.TriangleGlyph{}, Radius: vg.Points(2.5)},
	load.Timeout: {Color: color.RGBA{A: 255}, Shape: draw.CrossGlyph{}, Radius: vg.Points(2.5)},
	load.Status:  {Color: color.RGBA{G: 140, A: 255}, Shape: draw.PlusGlyph{}, Radius: vg.Points(2.5)},
	load.Other:   {Color: color.RGBA{R: 120, G: 120, A: 255}, Shape: draw.RingGlyph{}, Radius: vg.Points(2.5)},
}

// plotRun draws a run as SVG at path: the p99 latency of each bucket over
// time (log scale) above the failed requests of each bucket by class, both
// with the restart moments as vertical lines.
func plotRun(path string, r runResult) error {
	l := r.Load
	var lat plotter.XYs
	fail := map[load.Class]plotter.XYs{}
	for _, b := range l.Buckets {
		t := (b.StartMS + bucketMS/2) / 1000 // its middle
		if b.P99MS > 0 {
			lat = append(lat, plotter.XY{X: t, Y: b.P99MS})
		}
		for c, n := range b.FailedByClass {
			if n > 0 {
				fail[c] = append(fail[c], plotter.XY{X: t, Y: float64(n)})
			}
		}
	}
	marks := make(markLines, len(l.Marks))
	for i, m := range l.Marks {
		marks[i] = m.AtMS / 1000
	}
	s := r.Spec
	top := plot.New()
	top.Title.Text = fmt.Sprintf("%s, concurrency %d, rep %d: %d restarts, %d requests, %d failed",
		s.Contender, s.Concurrency, s.Rep, r.Restarts, l.Requests, l.Failed)
	top.Y.Label.Text = "p99 per bucket, ms"
	top.Y.Scale = plot.LogScale{}
	top.Y.Tick.Marker = logTicks{}
	bottom := plot.New()
	bottom.X.Label.Text = "time, s (grey: restarts)"
	bottom.Y.Label.Text = "failed per bucket"
	for _, p := range []*plot.Plot{top, bottom} {
		p.X.Min, p.X.Max = 0, l.DurationMS/1000
		p.Add(marks)
	}
	if len(lat) > 0 {
		line, err := plotter.NewLine(lat)
		if err != nil {
			return err
		}
		top.Add(line)
	}
	bottom.Y.Min, bottom.Y.Max = 0, 1
	bottom.Legend.Top = true
	for _, c := range classes {
		if len(fail[c]) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(fail[c])
		if err != nil {
			return err
		}
		sc.GlyphStyle = classStyle[c]
		bottom.Add(sc)
		bottom.Legend.Add(string(c), sc)
		_, _, _, ymax := plotter.XYRange(fail[c])
		bottom.Y.Max = math.Max(bottom.Y.Max, ymax*1.15)
	}
	return saveSVG(path, top, bottom)
}

// saveSVG draws the plots one above the other, with aligned axes, as SVG
// (or PNG if path ends in .png).
func saveSVG(path string, plots ...*plot.Plot) error {
	const w, h = 26 * vg.Centimeter, 16 * vg.Centimeter
	var img vg.CanvasWriterTo = vgsvg.New(w, h)
	if strings.HasSuffix(path, ".png") {
		img = vgimg.PngCanvas{Canvas: vgimg.New(w, h)}
	}
	dc := draw.New(img)
	rows := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		rows[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadX: vg.Millimeter, PadY: 2 * vg.Millimeter,
		PadTop: vg.Millimeter, PadBottom: vg.Millimeter, PadLeft: vg.Millimeter, PadRight: 3 * vg.Millimeter}
	cs := plot.Align(rows, tiles, dc)
	for i, p := range plots {
		p.Draw(cs[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := img.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// markLines draws a vertical line at each x, across the plot.
type markLines []float64

// Plot implements plot.Plotter.
func (m markLines) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	sty := draw.LineStyle{Color: markColor, Width: vg.Points(0.5)}
	for _, x := range m {
		X := trX(x)
		c.StrokeLine2(sty, X, c.Min.Y, X, c.Max.Y)
	}
}

// logTicks labels 1, 2, 3, 5 and 7 times each power of ten in range, so that a
// range within one decade still has labels.
type logTicks struct{}

// Ticks implements plot.Ticker.
func (logTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	if min <= 0 || max <= 0 {
		return ts
	}
	for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
		for _, m := range []float64{1, 2, 3, 5, 7} {
			v := m * math.Pow(10, e)
			if v >= min && v <= max {
				ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
			}
		}
	}
	return ts
}
