package fabric

// GradientBytes is the bytes one replica of the Pollux artifact's
// application app (its name in the traces and workloads) synchronises
// per step: its model's trainable parameters as 32-bit floats. The
// counts are those of the artifact's own model definitions
// (petuum/adaptdl, branch osdi21-artifact, benchmark/models/; counted
// by instantiating them, docs/fidelity.md, Part 3):
//
//   - imagenet: torchvision ResNet-50, 25 557 032 parameters;
//   - cifar10: the ResNet18 of benchmark/models/cifar10/models/resnet.py,
//     11 173 962;
//   - deepspeech2: DeepSpeech2 with 5 bidirectional GRU layers of 800
//     (train.py's defaults, 16 kHz, 20 ms windows, 29 labels),
//     41 187 968;
//   - yolov3: YOLOv3 (Darknet-53 with the FPN head) for the 20 PASCAL
//     VOC classes, 61 626 049;
//   - bert: bert-base-uncased with the SQuAD span head (run_squad.py),
//     109 483 778;
//   - ncf: NeuMF-end on MovieLens-1M (6040 users, 3706 items, 32
//     factors, 3 MLP layers), 1 602 657.
//
// ok is false for an application it does not know.
func GradientBytes(app string) (bytes float64, ok bool) {
	params, ok := parameters[app]
	return 4 * params, ok
}

var parameters = map[string]float64{
	"imagenet":    25_557_032,
	"cifar10":     11_173_962,
	"deepspeech2": 41_187_968,
	"yolov3":      61_626_049,
	"bert":        109_483_778,
	"ncf":         1_602_657,
}
