import {
	AbsoluteFill,
	interpolate,
	spring,
	useCurrentFrame,
	useVideoConfig,
} from 'remotion';
import {z} from 'zod';
import {metadataFromSeconds} from './validate-props';

// Attached to <Composition schema> (Studio editor) and enforced in
// calculateMetadata, i.e. at selectComposition() time, before any frame renders.
export const dataRecapSchema = z.object({
	title: z.string(),
	items: z
		.array(
			z.object({
				label: z.string(),
				value: z.number().finite().nonnegative(),
			}),
		)
		.min(1)
		.max(12),
	accentColor: z.string(),
	unit: z.string(),
	seconds: z.number().positive().max(600),
});

export type DataRecapProps = z.infer<typeof dataRecapSchema>;

export const dataRecapMetadata = metadataFromSeconds<DataRecapProps>('DataRecap', dataRecapSchema);

export const DataRecap: React.FC<DataRecapProps> = ({
	title,
	items,
	accentColor,
	unit,
}) => {
	const frame = useCurrentFrame();
	const {fps} = useVideoConfig();
	const max = Math.max(...items.map((i) => i.value), 1);
	const chartHeight = 420;
	const barWidth = Math.min(140, Math.floor(1000 / items.length) - 24);

	return (
		<AbsoluteFill
			style={{
				backgroundColor: '#111827',
				fontFamily: 'Liberation Sans, DejaVu Sans, Arial, sans-serif',
				padding: 60,
			}}
		>
			<div style={{color: 'white', fontSize: 56, fontWeight: 700}}>{title}</div>
			<div
				style={{
					position: 'absolute',
					left: 80,
					right: 80,
					bottom: 70,
					height: chartHeight + 90,
					display: 'flex',
					alignItems: 'flex-end',
					justifyContent: 'center',
					gap: 24,
				}}
			>
				{items.map((item, i) => {
					const grow = spring({
						frame: frame - 6 - i * 4,
						fps,
						config: {damping: 200},
					});
					const h = (item.value / max) * chartHeight * grow;
					const shown = Math.round(item.value * grow);
					return (
						<div
							key={i}
							style={{
								display: 'flex',
								flexDirection: 'column',
								alignItems: 'center',
								width: barWidth,
							}}
						>
							<div
								style={{
									color: 'white',
									fontSize: 28,
									marginBottom: 8,
									opacity: interpolate(grow, [0, 0.3], [0, 1], {
										extrapolateRight: 'clamp',
									}),
								}}
							>
								{shown}
								{unit}
							</div>
							<div
								style={{
									width: barWidth,
									height: h,
									backgroundColor: accentColor,
									borderRadius: '6px 6px 0 0',
								}}
							/>
							<div
								style={{
									color: '#9ca3af',
									fontSize: 24,
									marginTop: 10,
									whiteSpace: 'nowrap',
									overflow: 'hidden',
									textOverflow: 'ellipsis',
									maxWidth: barWidth + 24,
								}}
							>
								{item.label}
							</div>
						</div>
					);
				})}
			</div>
		</AbsoluteFill>
	);
};
